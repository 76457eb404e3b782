//go:build !unix

package fileowner

import "io/fs"

// Of reports no owner: permission bits mean nothing to check against here
// (Windows reports 0666 or 0444 for every file).
func Of(fs.FileInfo) (Owner, bool) { return Owner{}, false }
