// Command trafficsim SIMULATES traffic to the Pods of the deployments
// agentd manages in one region, for the dev stack and tests: kwok's Pods
// run no code, so it stands in for the application and exports what an
// instrumented one would, for that region's Prometheus to scrape. See
// `trafficsim --help` and internal/trafficsim.
package main
