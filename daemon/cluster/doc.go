// Package cluster implements the gRPC ClusterService agents call: the watch
// stream (served by package stream) and status intake. Status is actual
// state: it is written without change rows (changefeed.ActualState), each
// report in one transaction, and only for the caller's own region.
package cluster
