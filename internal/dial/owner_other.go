//go:build !unix

package dial

import "io/fs"

// fileOwner is a file's owning user and group.
type fileOwner struct{ uid, gid uint32 }

// ownership reports no owner: permission bits mean nothing to check
// against here (Windows reports 0666 or 0444 for every file).
func ownership(fs.FileInfo) (fileOwner, bool) { return fileOwner{}, false }
