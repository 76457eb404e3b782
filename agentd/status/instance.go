package status

import (
	"cmp"
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/limits"
	"github.com/deploysync/deploysync/internal/validate"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Reasons an instance is not ready that ctrld's health gates and the
// console name: Kubernetes' own words, as kubectl shows them.
const (
	ReasonCrashLoopBackOff = "CrashLoopBackOff"
	ReasonImagePullBackOff = "ImagePullBackOff"
	ReasonErrImagePull     = "ErrImagePull"
	ReasonOOMKilled        = "OOMKilled"
	ReasonUnschedulable    = corev1.PodReasonUnschedulable
)

// instance is what the report says of one Pod.
func instance(p *corev1.Pod) *ctrlv1.Instance {
	in := &ctrlv1.Instance{PodName: p.Name, Address: p.Status.PodIP,
		SpecHash: p.Labels[kube.SpecHashLabel], Ready: podReady(p), Restarts: restarts(p)}
	switch p.Status.Phase {
	case corev1.PodPending:
		in.Status = ctrlv1.InstanceStatus_INSTANCE_STATUS_PENDING
	case corev1.PodRunning:
		in.Status = ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING
	case corev1.PodFailed, corev1.PodSucceeded:
		in.Status = ctrlv1.InstanceStatus_INSTANCE_STATUS_FAILED
	}
	if !in.Ready {
		in.Reason = validate.Text(notReadyReason(p), limits.MaxInstanceReasonBytes)
	}
	for _, c := range p.Spec.Containers {
		in.CpuMillicores += int32(c.Resources.Requests.Cpu().MilliValue())
		in.MemoryMib += int32(c.Resources.Requests.Memory().Value() >> 20)
	}
	return in
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// restarts sums the restart counts of the Pod's containers, init
// containers included (a crash-looping init container holds the Pod).
func restarts(p *corev1.Pod) int32 {
	var n int64
	for _, cs := range containerStatuses(p) {
		n += int64(max(cs.RestartCount, 0))
	}
	return int32(min(n, math.MaxInt32))
}

// notReadyReason says why a Pod that is not ready is not, in Kubernetes'
// words, most telling first:
//
//   - OOMKilled, when a container's current or last run ended so: it is
//     why a container crash-loops (whose waiting reason, CrashLoopBackOff,
//     says only that it does);
//   - a container waiting as CrashLoopBackOff, ImagePullBackOff or
//     ErrImagePull;
//   - Unschedulable, when the scheduler found no node for it;
//   - otherwise any container's waiting reason (ContainerCreating,
//     CreateContainerConfigError, ...), then any terminated one (Error,
//     Completed), then how the last run of a container that restarted
//     ended ("restarted: its last run ended Error (exit code 1)"), then
//     the Pod's own (Evicted);
//
// and "" when nothing says. Init containers count first, as they run
// first. Callers clip what it returns to the report's bound.
func notReadyReason(p *corev1.Pod) string {
	statuses := containerStatuses(p)
	for _, cs := range statuses {
		if t := cs.State.Terminated; t != nil && t.Reason == ReasonOOMKilled {
			return ReasonOOMKilled
		}
		if t := cs.LastTerminationState.Terminated; t != nil && t.Reason == ReasonOOMKilled {
			return ReasonOOMKilled
		}
	}
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case ReasonCrashLoopBackOff, ReasonImagePullBackOff, ReasonErrImagePull:
				return w.Reason
			}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == ReasonUnschedulable {
			return ReasonUnschedulable
		}
	}
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason
		}
	}
	for _, cs := range statuses {
		if t := cs.State.Terminated; t != nil && t.Reason != "" {
			return t.Reason
		}
	}
	// A container that died and came back runs again, not ready yet:
	// its last run's end is why (kubectl describe's "Last State").
	for _, cs := range statuses {
		if t := cs.LastTerminationState.Terminated; cs.State.Running != nil && t != nil {
			return fmt.Sprintf("restarted: its last run ended %s (exit code %d)", cmp.Or(t.Reason, "without a reason"), t.ExitCode)
		}
	}
	return p.Status.Reason
}

// containerStatuses lists the init containers' statuses, then the others'.
func containerStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
}
