// Package rpc holds deploysync's gRPC API: the .proto sources under proto/
// and the Go code generated from them in ctrlv1/ (`go tool task gen`).
package rpc

//go:generate go tool -modfile=../tools/buf/go.mod buf lint
//go:generate go tool -modfile=../tools/buf/go.mod buf generate
