package liveview

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/agentd/status"
	"github.com/deploysync/deploysync/internal/textclean"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Bounds of the short texts of a view.
const (
	maxName    = 253
	maxReason  = 256
	maxMessage = 1 << 10
)

// readCtx bounds one API read of a view by FirstByte.
func (s *Server) readCtx(ctx context.Context, what string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.cfg.FirstByte, fmt.Errorf("%w: listing %s took more than %v", ErrNoFirstByte, what, s.cfg.FirstByte))
}

// deploymentPods lists the deployment's Pods (at most MaxPods, by name).
func (s *Server) deploymentPods(ctx context.Context, req *ctrlv1.LiveRequest) ([]corev1.Pod, error) {
	ctx, cancel := s.readCtx(ctx, "pods")
	defer cancel()
	list, err := s.deps.Kube.CoreV1().Pods(req.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: selector(req.GetDeploymentId())})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", cause(ctx, err))
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !theDeployments(p.Labels, req.GetDeploymentId()) })
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return pods[:min(len(pods), MaxPods)], nil
}

// pods is the Pods view.
func (s *Server) pods(ctx context.Context, req *ctrlv1.LiveRequest) ([]*ctrlv1.LivePod, error) {
	pods, err := s.deploymentPods(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]*ctrlv1.LivePod, 0, len(pods))
	for i := range pods {
		out = append(out, livePod(&pods[i]))
	}
	return out, nil
}

// livePod is what the view says of one Pod: the status reports' words
// for readiness, restarts and why not ready.
func livePod(p *corev1.Pod) *ctrlv1.LivePod {
	lp := &ctrlv1.LivePod{
		Name:      textclean.Clean(p.Name, maxName),
		Phase:     textclean.Clean(string(p.Status.Phase), maxReason),
		Ready:     status.PodReady(p),
		Restarts:  status.Restarts(p),
		SpecHash:  textclean.Clean(p.Labels[kube.SpecHashLabel], maxName),
		Node:      textclean.Clean(p.Spec.NodeName, maxName),
		CreatedAt: timestamppb.New(p.CreationTimestamp.Time),
	}
	if !lp.Ready {
		lp.Why = textclean.Clean(status.NotReadyReason(p), maxReason)
	}
	statuses := map[string]corev1.ContainerStatus{}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		statuses[cs.Name] = cs
	}
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		lc := &ctrlv1.LiveContainer{Name: textclean.Clean(c.Name, maxName)}
		if cs, ok := statuses[c.Name]; ok {
			lc.Ready, lc.Restarts = cs.Ready, cs.RestartCount
			var message string
			switch st := cs.State; {
			case st.Running != nil:
				lc.State = "running"
			case st.Waiting != nil:
				lc.State, lc.Reason = "waiting", textclean.Clean(st.Waiting.Reason, maxReason)
			case st.Terminated != nil:
				lc.State, lc.Reason = "terminated", textclean.Clean(st.Terminated.Reason, maxReason)
				message = st.Terminated.Message
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				lc.LastExit = textclean.Clean(fmt.Sprintf("%s (exit code %d)", cmp.Or(t.Reason, "no reason"), t.ExitCode), maxReason)
				message = cmp.Or(message, t.Message)
			}
			lc.TerminationMessage = textclean.Clean(message, MaxTerminationMessage)
		}
		lp.Containers = append(lp.Containers, lc)
	}
	return lp
}

// object is one of the deployment's objects whose events the view shows.
type object struct{ kind, name string }

// events is the events view: the newest MaxEvents events of the
// deployment's Pods, StatefulSets and Services, oldest first. Each
// object's are asked for by its kind and name (the API server filters),
// and checked again.
func (s *Server) events(ctx context.Context, req *ctrlv1.LiveRequest) ([]*ctrlv1.LiveEvent, error) {
	pods, err := s.deploymentPods(ctx, req)
	if err != nil {
		return nil, err
	}
	var objects []object
	for _, p := range pods {
		objects = append(objects, object{"Pod", p.Name})
	}
	ns, opts := req.GetNamespace(), metav1.ListOptions{LabelSelector: selector(req.GetDeploymentId())}
	listCtx, cancel := s.readCtx(ctx, "the deployment's objects")
	defer cancel()
	sets, err := s.deps.Kube.AppsV1().StatefulSets(ns).List(listCtx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing statefulsets: %w", cause(listCtx, err))
	}
	for _, o := range sets.Items {
		if theDeployments(o.Labels, req.GetDeploymentId()) {
			objects = append(objects, object{"StatefulSet", o.Name})
		}
	}
	services, err := s.deps.Kube.CoreV1().Services(ns).List(listCtx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing services: %w", cause(listCtx, err))
	}
	for _, o := range services.Items {
		if theDeployments(o.Labels, req.GetDeploymentId()) {
			objects = append(objects, object{"Service", o.Name})
		}
	}

	var events []*ctrlv1.LiveEvent
	for _, o := range objects {
		readCtx, cancel := s.readCtx(ctx, "events")
		list, err := s.deps.Kube.CoreV1().Events(ns).List(readCtx, metav1.ListOptions{
			FieldSelector: fields.SelectorFromSet(fields.Set{"involvedObject.kind": o.kind, "involvedObject.name": o.name}).String(),
			Limit:         MaxEvents,
		})
		err = cause(readCtx, err)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("listing the events of %s %s: %w", o.kind, o.name, err)
		}
		for i := range list.Items {
			e := &list.Items[i]
			if e.InvolvedObject.Kind != o.kind || e.InvolvedObject.Name != o.name || e.Namespace != ns {
				continue
			}
			events = append(events, liveEvent(e))
		}
	}
	slices.SortStableFunc(events, func(a, b *ctrlv1.LiveEvent) int { return a.LastSeen.AsTime().Compare(b.LastSeen.AsTime()) })
	return events[max(0, len(events)-MaxEvents):], nil
}

// liveEvent is one event as the view shows it: when it was last seen
// whichever API wrote it (core/v1's lastTimestamp, events.k8s.io's series
// or eventTime).
func liveEvent(e *corev1.Event) *ctrlv1.LiveEvent {
	last := e.LastTimestamp.Time
	count := e.Count
	if e.Series != nil {
		last = latest(last, e.Series.LastObservedTime.Time)
		count = max(count, e.Series.Count)
	}
	last = latest(last, e.EventTime.Time)
	if last.IsZero() {
		last = latest(e.FirstTimestamp.Time, e.CreationTimestamp.Time)
	}
	return &ctrlv1.LiveEvent{
		Object:   textclean.Clean(e.InvolvedObject.Kind+" "+e.InvolvedObject.Name, maxName),
		Type:     textclean.Clean(e.Type, maxReason),
		Reason:   textclean.Clean(e.Reason, maxReason),
		Message:  textclean.Clean(e.Message, maxMessage),
		Count:    max(count, 1),
		LastSeen: timestamppb.New(last),
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
