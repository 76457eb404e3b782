package status

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/internal/limits"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

func waiting(reason string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
}

func terminated(reason string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: 1}}
}

var running = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}

func container(state corev1.ContainerState, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: "app", State: state, RestartCount: restarts}
}

func condition(t corev1.PodConditionType, s corev1.ConditionStatus, reason string) corev1.PodCondition {
	return corev1.PodCondition{Type: t, Status: s, Reason: reason}
}

func TestNotReadyReason(t *testing.T) {
	crashedOOM := container(waiting(ReasonCrashLoopBackOff), 4)
	crashedOOM.LastTerminationState = terminated(ReasonOOMKilled)
	cameBack := container(running, 1)
	cameBack.LastTerminationState = terminated("Error")
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		want   string
	}{
		{"nothing said", corev1.PodStatus{Phase: corev1.PodPending}, ""},
		{"died and came back, not ready yet", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{cameBack}}, "restarted: its last run ended Error (exit code 1)"},
		{"crash loop", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{container(waiting(ReasonCrashLoopBackOff), 3)}}, ReasonCrashLoopBackOff},
		{"image pull back-off", corev1.PodStatus{Phase: corev1.PodPending,
			ContainerStatuses: []corev1.ContainerStatus{container(waiting(ReasonImagePullBackOff), 0)}}, ReasonImagePullBackOff},
		{"image pull error", corev1.PodStatus{Phase: corev1.PodPending,
			ContainerStatuses: []corev1.ContainerStatus{container(waiting(ReasonErrImagePull), 0)}}, ReasonErrImagePull},
		{"OOM-killed now", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{container(terminated(ReasonOOMKilled), 1)}}, ReasonOOMKilled},
		{"crash-looping because OOM-killed", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{crashedOOM}}, ReasonOOMKilled},
		{"unschedulable", corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{condition(corev1.PodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable)}}, ReasonUnschedulable},
		{"scheduled", corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{condition(corev1.PodScheduled, corev1.ConditionTrue, "")}}, ""},
		{"a failing reason beats a transient one in another container", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{container(waiting("ContainerCreating"), 0), container(waiting(ReasonCrashLoopBackOff), 2)}}, ReasonCrashLoopBackOff},
		{"another waiting reason", corev1.PodStatus{Phase: corev1.PodPending,
			ContainerStatuses: []corev1.ContainerStatus{container(waiting("CreateContainerConfigError"), 0)}}, "CreateContainerConfigError"},
		{"a terminated reason", corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{container(terminated("Error"), 0)}}, "Error"},
		{"an init container crash-looping", corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{container(waiting(ReasonCrashLoopBackOff), 5)},
			ContainerStatuses:     []corev1.ContainerStatus{container(waiting("PodInitializing"), 0)}}, ReasonCrashLoopBackOff},
		{"the Pod's own reason", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, "Evicted"},
		{"running, not ready yet", corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{container(running, 0)}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := notReadyReason(&corev1.Pod{Status: tc.status}); got != tc.want {
				t.Errorf("notReadyReason = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInstanceReportsHashReasonAndRestarts: the report carries the Pod's
// spec hash label, a reason only when it is not ready (clipped to the
// bound ctrld takes), and the restarts of all its containers.
func TestInstanceReportsHashReasonAndRestarts(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "api-0", Labels: map[string]string{kube.SpecHashLabel: "abc123"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{container(terminated("Completed"), 1)},
			ContainerStatuses:     []corev1.ContainerStatus{container(waiting(ReasonCrashLoopBackOff), 3), container(running, 2)}},
	}
	in := instance(pod)
	if in.GetSpecHash() != "abc123" || in.GetReason() != ReasonCrashLoopBackOff || in.GetRestarts() != 6 || in.GetReady() ||
		in.GetStatus() != ctrlv1.InstanceStatus_INSTANCE_STATUS_RUNNING {
		t.Errorf("crash-looping Pod reported as %v", in)
	}

	pod.Status.Conditions = []corev1.PodCondition{condition(corev1.PodReady, corev1.ConditionTrue, "")}
	if in := instance(pod); !in.GetReady() || in.GetReason() != "" || in.GetRestarts() != 6 {
		t.Errorf("ready Pod reported as %v; want ready, no reason, its restarts", in)
	}

	pod.Status.Conditions = nil
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{container(waiting(strings.Repeat("é", 40)), 0)}
	if r := instance(pod).GetReason(); len(r) > limits.MaxInstanceReasonBytes || !strings.HasPrefix(r, "éé") || strings.ContainsRune(r, '\uFFFD') {
		t.Errorf("long reason reported as %q (%d bytes); want at most %d, whole characters", r, len(r), limits.MaxInstanceReasonBytes)
	}

	delete(pod.Labels, kube.SpecHashLabel)
	if h := instance(pod).GetSpecHash(); h != "" {
		t.Errorf("Pod without the label reported spec hash %q", h)
	}
}
