//go:build unix

package fileowner

import (
	"io/fs"
	"syscall"
)

// Of returns info's owner; false where the system does not say.
func Of(info fs.FileInfo) (Owner, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return Owner{}, false
	}
	return Owner{UID: st.Uid, GID: st.Gid}, true
}
