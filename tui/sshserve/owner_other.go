//go:build !unix

package sshserve

import "io/fs"

// fileOwner is a file's owning user and group.
type fileOwner struct{ uid, gid uint32 }

// ownership reports no owner: permission bits mean nothing to check
// against here.
func ownership(fs.FileInfo) (fileOwner, bool) { return fileOwner{}, false }
