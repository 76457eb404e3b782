// Package viewhash keys the hashes ctrld shows operators.
//
// A spec hash (desired.SpecHash) and the objects' hash annotations
// (internal/manifest) are plain SHA-256 over a spec, env values included.
// The operator API redacts env values and command arguments but shows
// every other input to those hashes, so an unkeyed hash is an oracle: a
// read-only key recovered a 4-digit DB_PIN from GetDesiredState in 330 ms.
// Agents need the real hash (it is the pods' unkey.spec.hash label, which
// the rollout gates compare), and changing it would restart every pod, so
// the stored and streamed hashes stay as they are and what a viewer is
// shown is their HMAC-SHA256 under a secret of the installation, cut to
// the same sixteen hex digits (Key.Of). Equal hashes stay equal and
// distinct ones distinct (at 64 bits), on every replica, since all read
// one secret from the database; without it, a guess cannot be checked.
//
// The secret is the installation_secrets row "view_hash": 32 random bytes
// made once per database (Ensure, at `ctrld migrate` and at first use),
// never changed and never shown by any API.
package viewhash
