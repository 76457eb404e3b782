package fileowner

import "os"

// Owner is a file's owning user and group.
type Owner struct{ UID, GID uint32 }

// InGroup reports whether this process is in group gid.
func InGroup(gid uint32) bool {
	if uint32(os.Getegid()) == gid {
		return true
	}
	groups, err := os.Getgroups()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if uint32(g) == gid {
			return true
		}
	}
	return false
}
