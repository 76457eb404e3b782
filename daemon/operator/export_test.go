package operator

import "time"

// SetAuditTimeout sets auditTimeout until the returned func puts it back.
func SetAuditTimeout(d time.Duration) (restore func()) {
	old := auditTimeout
	auditTimeout = d
	return func() { auditTimeout = old }
}
