package liveview

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/textclean"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// admit is the agent's own decision that it may show anything of the
// request's deployment: a namespace that is not reserved and is the
// agent's. Nothing is read before it, and nothing after it refuses.
func (s *Server) admit(ctx context.Context, req *ctrlv1.LiveRequest) error {
	ns, id := req.GetNamespace(), req.GetDeploymentId()
	if ns == "" || id == "" {
		return fmt.Errorf("%w: a live view names a namespace and a deployment", ErrBadRequest)
	}
	if why, reserved := s.deps.Reserved.Why(ns); reserved {
		return fmt.Errorf("%w: namespace %s is reserved (%s): the agent shows nothing of it", ErrRefused, quote(ns), why)
	}
	readCtx, cancel := context.WithTimeoutCause(ctx, s.cfg.FirstByte, fmt.Errorf("%w: reading the namespace took more than %v", ErrNoFirstByte, s.cfg.FirstByte))
	defer cancel()
	owned, err := s.deps.Namespaces.Owns(readCtx, ns)
	if err != nil {
		return fmt.Errorf("reading namespace %s: %w", quote(ns), cause(readCtx, err))
	}
	if !owned {
		return fmt.Errorf("%w: namespace %s is not the agent's (it shows only namespaces labeled %s)", ErrRefused, quote(ns), kube.ManagedSelector)
	}
	return nil
}

// selector selects the deployment's objects: the agent's, with its ID.
func selector(id string) string {
	return labels.SelectorFromSet(labels.Set{kube.ManagedByLabel: kube.ManagedByValue, kube.DeploymentLabel: id}).String()
}

// theDeployments reports whether an object's labels make it the
// deployment's: the API server selected it so, and the agent checks
// again rather than trust the selection.
func theDeployments(l map[string]string, id string) bool {
	return kube.Managed(l) && l[kube.DeploymentLabel] == id
}

// pod reads the request's Pod and refuses it unless it is the
// deployment's.
func (s *Server) pod(ctx context.Context, req *ctrlv1.LiveRequest) (*corev1.Pod, error) {
	if req.GetPod() == "" {
		return nil, fmt.Errorf("%w: logs name a pod", ErrBadRequest)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.FirstByte, fmt.Errorf("%w: reading the pod took more than %v", ErrNoFirstByte, s.cfg.FirstByte))
	defer cancel()
	p, err := s.deps.Kube.CoreV1().Pods(req.GetNamespace()).Get(ctx, req.GetPod(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("pod %s not found in namespace %s", quote(req.GetPod()), quote(req.GetNamespace()))
	}
	if err != nil {
		return nil, fmt.Errorf("reading pod %s: %w", quote(req.GetPod()), cause(ctx, err))
	}
	if !theDeployments(p.Labels, req.GetDeploymentId()) {
		return nil, fmt.Errorf("%w: pod %s is not one the agent manages for deployment %s", ErrRefused, quote(req.GetPod()), quote(req.GetDeploymentId()))
	}
	return p, nil
}

// cause is ctx's cause when it ended, else err.
func cause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if c := context.Cause(ctx); c != nil {
			return c
		}
	}
	return err
}

// quote quotes a name from the request for an error text.
func quote(s string) string {
	return fmt.Sprintf("%q", textclean.Clean(s, 128))
}
