// Package tailer follows deployment_changes for all regions, once per ctrld
// process, and fans the rows out to the region streams in memory: database
// load does not grow with the number of connected agents.
//
// # The problem: commit order is not pk order
//
// MySQL and MariaDB hand out auto-increment values when a row is inserted,
// not when its transaction commits, and a rolled-back insert leaves a hole
// forever. A reader that asks for pk > cursor and then moves the cursor to
// the largest pk it saw skips every row whose transaction commits after a
// higher pk became visible. The seed design did exactly that and relied on a
// five-minute full resync to repair it.
//
// # The safe watermark
//
// The tailer keeps W, the safe watermark: every pk at or below W belongs to
// a committed change row or is provably dead. Clients are only ever given
// resume versions at or below W (see the stream package), so a client that
// resumes can never have skipped a change. Rows above W that are already
// visible are delivered at once ("early"): latency does not wait for slow
// transactions, only the resume version does. A reconnecting client may see
// such rows again; applies are idempotent.
//
// Every pk between W and the newest pk seen that is not visible is a hole.
// Holes are re-read on every poll. A hole still open after HoleGrace is
// settled with certainty by the filler (kine's approach): it runs INSERT
// IGNORE of a "gap" row with exactly that pk. InnoDB makes that insert wait
// behind the row lock of an in-flight insert of the same pk, so when the
// statement returns, the pk either holds the real row (the writer committed;
// our duplicate was ignored) or our gap row (the writer rolled back, or the
// value was never used). Either way the next poll sees it and W moves on.
// Gap rows are never streamed. Holes are kept as runs of pks and re-read
// and filled in bounded batches, so a jump of the auto-increment counter (an
// ALTER TABLE, a bulk insert's unused reservation) costs one entry and is
// settled at the database's insert rate: a million pks in about 9 s, with a
// few MiB of heap.
//
// Worst-case added latency: a change is streamed on the first poll after it
// commits (PollInterval, 100 ms by default, or at once after a local write
// pokes the tailer). A rolled-back or skipped pk holds W, and with it the
// resume version but not the delivery of later events, for HoleGrace +
// PollInterval + the filler's run time: about 0.6 s by default. A transaction
// that stays open holds W for as long as it stays open (the filler waits
// FillerLockWait per attempt, then retries), which is exactly what
// correctness demands.
//
// W is persisted in stream_marks (only ever increased), so a restarted or
// additional ctrld starts from a watermark that is already safe instead of
// trusting the table's current maximum.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package tailer
