// Package rpc holds deploysync's gRPC API: the .proto sources under proto/
// and the Go code generated from them in ctrlv1/ (`go tool task gen`).
package rpc
