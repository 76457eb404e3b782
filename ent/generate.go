// Package ent is the generated Ent client for deploysync's state in MySQL.
//
// Everything in this directory is generated from ./schema by
// `go tool task gen` except schema/, changefeed/ and jsontype/, which are
// written by hand. Import ent/runtime (daemon/store does) or the schema hooks, which
// write the deployment_changes rows, do not run.
package ent

//go:generate go tool ent generate --feature sql/upsert,sql/lock,sql/execquery,sql/modifier ./schema
