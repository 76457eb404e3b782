package dial

import "errors"

// ErrPlaintextNonLoopback is Ctrld's answer to Insecure towards an address
// that is not loopback, without InsecureNonLoopback.
var ErrPlaintextNonLoopback = errors.New("refusing to send the token without TLS")

// ErrTokenFileReadable is Token's answer to a token file that users other
// than its owner may read.
var ErrTokenFileReadable = errors.New("refusing a token file that users other than its owner may read")

// ErrTokenFileNotOwned is Token's answer to a token file owned by a user
// other than this process's or root.
var ErrTokenFileNotOwned = errors.New("refusing a token file that another user owns")
