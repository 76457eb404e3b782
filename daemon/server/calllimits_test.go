package server_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/deploysync/deploysync/daemon/server"
	"github.com/deploysync/deploysync/daemon/server/servertest"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// One agent token sending its costliest status reports (5,000 sentinels of
// different statuses, an UPDATE each in one transaction) from 64
// goroutines at once leaves operators their calls: each answers within its
// 5 s deadline (before the limits, the reports held all 45 connections of
// the main pool and operators' calls timed out), and the calls beyond the
// token's limit are refused as such.
func TestOneTokensReportsLeaveOperatorsTheirCalls(t *testing.T) {
	env := servertest.Start(t, server.Config{})
	agent := env.Agent("eu")
	op := env.Operator("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report := &ctrlv1.ReportSentinelStatusRequest{Region: "eu"}
	for i := range 5000 {
		// Each with a status of its own: an UPDATE each.
		report.Sentinels = append(report.Sentinels, &ctrlv1.SentinelStatus{SentinelId: fmt.Sprintf("s-%05d", i), AvailableReplicas: int32(i)})
	}
	floodCtx, stopFlood := context.WithCancel(ctx)
	var flood sync.WaitGroup
	var refused atomic.Int64
	for range 64 {
		flood.Go(func() {
			for floodCtx.Err() == nil {
				_, err := agent.ReportSentinelStatus(floodCtx, report)
				if code(err) == codes.ResourceExhausted {
					refused.Add(1)
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	defer func() { stopFlood(); flood.Wait() }()
	time.Sleep(2 * time.Second)
	for i := range 5 {
		callCtx, end := context.WithTimeout(ctx, 5*time.Second)
		_, err := op.ListRegions(callCtx, &ctrlv1.ListRegionsRequest{})
		end()
		if err != nil {
			t.Fatalf("operator call %d while one agent token floods status reports: %v", i, err)
		}
	}
	if refused.Load() == 0 {
		t.Error("no report of the 64 at once was refused for the token's limit")
	}
}
