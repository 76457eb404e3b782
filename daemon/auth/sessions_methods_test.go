package auth

import (
	"testing"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// Every operator service method is classified read, write or log read on purpose:
// a method added to the service fails here until it is named in one list.
func TestEveryOperatorMethodIsClassified(t *testing.T) {
	desc := ctrlv1.OperatorService_ServiceDesc
	var names []string
	for _, m := range desc.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range desc.Streams {
		names = append(names, s.StreamName)
	}
	seen := map[string]bool{}
	for _, name := range names {
		full := "/" + desc.ServiceName + "/" + name
		seen[full] = true
		n := 0
		for _, in := range []map[string]bool{readMethods, writeMethods, logMethods} {
			if in[full] {
				n++
			}
		}
		switch n {
		case 0:
			t.Errorf("%s is neither a read, a write nor a log read: name it in readMethods, writeMethods or logMethods (daemon/auth/sessions.go)", full)
		case 2, 3:
			t.Errorf("%s is in more than one of readMethods, writeMethods and logMethods", full)
		}
		if IsRead(full) != readMethods[full] {
			t.Errorf("IsRead(%s) = %v, against readMethods", full, IsRead(full))
		}
	}
	for full := range readMethods {
		if !seen[full] {
			t.Errorf("readMethods names %s, which the service does not have", full)
		}
	}
	for full := range writeMethods {
		if !seen[full] {
			t.Errorf("writeMethods names %s, which the service does not have", full)
		}
	}
	for full := range logMethods {
		if !seen[full] {
			t.Errorf("logMethods names %s, which the service does not have", full)
		}
	}
}

// A write named like a read is still a write.
func TestIsReadIsAListNotAPrefix(t *testing.T) {
	for _, m := range []string{"/deploysync.ctrl.v1.OperatorService/GetOrCreateRegion", "/deploysync.ctrl.v1.OperatorService/ListAndPurge", "/other.Service/ListRegions"} {
		if IsRead(m) {
			t.Errorf("%s counts as a read", m)
		}
	}
}
