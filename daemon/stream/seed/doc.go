// Package seed is the source design's stream algorithm, kept only so tests
// and benchmarks can show, side by side with package stream, what it gets
// wrong and how much it costs. Never serve it to agents.
//
// Per stream it polls "pk > cursor" every 0.5-1.5 s when idle (at once when
// a poll filled its page), looks up each row's
// state with its own query, and moves the cursor to the largest pk it saw.
// A transaction that took a lower pk and commits later is skipped for good.
// A full sync (cursor 0) takes MAX(pk) and streams the region's state
// tables.
package seed
