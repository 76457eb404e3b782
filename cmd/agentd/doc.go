// Command agentd ("krane") reconciles one Kubernetes cluster from ctrld's
// stream for its region. See `agentd --help`.
package main
