package agent

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

func metaFor(name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace}
}
