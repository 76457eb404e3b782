package rpc

// AcceptedHeader is the response header ctrld sends on a watch stream once
// it has accepted it (before any event, which a paused region may not send
// for hours). A stream refused before that ends without it.
const AcceptedHeader = "deploysync-accepted"

//go:generate go tool -modfile=../tools/buf/go.mod buf lint
//go:generate go tool -modfile=../tools/buf/go.mod buf generate
