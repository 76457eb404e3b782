package status

import corev1 "k8s.io/api/core/v1"

// PodReady reports whether the Pod's Ready condition is true, as the
// status reports say it.
func PodReady(p *corev1.Pod) bool { return podReady(p) }

// Restarts is the Pod's restarts as the status reports count them: every
// container's, init containers included.
func Restarts(p *corev1.Pod) int32 { return restarts(p) }

// NotReadyReason says why a Pod that is not ready is not, as the status
// reports and the health gates say it (CrashLoopBackOff, OOMKilled,
// Unschedulable, ..., else Kubernetes' own words; see notReadyReason),
// unclipped; "" when nothing says.
func NotReadyReason(p *corev1.Pod) string { return notReadyReason(p) }
