package trafficsim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/deploysync/deploysync/internal/manifest"
)

// Selector selects the Pods of the deployments agentd manages: its
// managed-by mark and a deployment ID. Other Pods get no traffic.
var Selector = manifest.ManagedByLabel + "=" + manifest.ManagedByValue + "," + manifest.DeploymentLabel

// Run watches the managed Pods of every namespace through client and
// tells the simulator of each change, until ctx ends; then it returns nil.
// While the API server is away client-go retries, and the Pods go on
// serving as last seen: applications do not stop when their control plane
// does.
func (s *Simulator) Run(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = Selector }))
	pods := factory.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.observe(obj) },
		UpdateFunc: func(_, obj any) { s.observe(obj) },
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				s.Forget(p.UID)
			}
		},
	}); err != nil {
		return fmt.Errorf("trafficsim: watch Pods: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return nil // ctx ended first
	}
	<-ctx.Done()
	return nil
}

func (s *Simulator) observe(obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		s.Observe(p)
	}
}
