// Package limits holds the sizes ctrld and its clients must agree on: the
// largest gRPC message either side sends or accepts, and the largest single
// resource ctrld accepts, chosen well under the message limit so that every
// accepted resource fits in one stream event with room to spare.
//
// ctrld sets its send and receive limits from MaxMessageBytes, and agentd
// and unkey-tui set their receive limits from it, so a resource that ctrld
// accepted can never be one that an agent refuses to receive (a poison
// message that would fail every full sync of its region).
package limits
