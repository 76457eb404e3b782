package manifest

import "fmt"

// Rehashed is d with every hash on it replaced by what hash makes of it:
// the hash annotation of each object and the spec-hash label on the pod
// template. ctrld shows operators keyed hashes (daemon/viewhash), since
// the plain ones, over env values they may not read, are an oracle for
// those values. The result is for showing only: its objects are copies,
// and d's, which the agent applies, are unchanged.
func (d Deployment) Rehashed(hash func(string) string) (Deployment, error) {
	svc, err := clone(d.Service)
	if err != nil {
		return Deployment{}, fmt.Errorf("copy the Service: %w", err)
	}
	sts, err := clone(d.StatefulSet)
	if err != nil {
		return Deployment{}, fmt.Errorf("copy the StatefulSet: %w", err)
	}
	rehash := func(m map[string]string, key string) {
		if h, ok := m[key]; ok {
			m[key] = hash(h)
		}
	}
	if svc.ObjectMetaApplyConfiguration != nil {
		rehash(svc.Annotations, HashAnnotation)
	}
	if sts.ObjectMetaApplyConfiguration != nil {
		rehash(sts.Annotations, HashAnnotation)
	}
	if sts.Spec != nil && sts.Spec.Template != nil && sts.Spec.Template.ObjectMetaApplyConfiguration != nil {
		rehash(sts.Spec.Template.Labels, SpecHashLabel)
	}
	return Deployment{Service: svc, StatefulSet: sts, ServiceHash: hash(d.ServiceHash), StatefulSetHash: hash(d.StatefulSetHash)}, nil
}
