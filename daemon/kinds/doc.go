// Package kinds is ctrld's registry of the resource kinds it streams to
// agents: deployments (a deployment's run in one region), sentinels and
// Cilium network policies. Each kind says once, in one Kind value, what
// the rest of ctrld would otherwise switch on:
//
//   - its names: the kind agents report and metrics label (rpc.Kind*), and
//     its resource_type in the change log;
//   - how a full sync pages through a region's resources (Page);
//   - how the resources named by change rows load as events, a gone or
//     stopped one as a delete (Load, invariant I4);
//   - which resources a region desires, for agents' sync reports (Desired)
//     and retention's sweep of the reports of gone ones (DesiredSQL).
//
// The stream, the cluster service, region health and retention loop over
// All or look a kind up by its change type; none of them names a kind. Adding a kind
// is its schema, its proto message, one entry here, and one controller in
// agentd.
//
// The invariants cited by number (I1-I8) are stated in docs/design.md.
package kinds
