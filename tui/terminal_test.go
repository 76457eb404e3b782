//go:build linux

package tui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc"

	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// openPTY opens a pseudo-terminal pair: the console's side (a terminal)
// and the test's side, which reads what the console draws and types keys.
func openPTY(t *testing.T) (console, test *os.File) {
	t.Helper()
	test, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, test.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatal(e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, test.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	console, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	size := [4]uint16{24, 80, 0, 0} // rows, columns: a fresh pseudo-terminal has none
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, console.Fd(), syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&size))); e != 0 {
		t.Fatal(e)
	}
	t.Cleanup(func() { console.Close(); test.Close() })
	return console, test
}

// emptyOperator lists no regions.
type emptyOperator struct{ ctrlv1.OperatorServiceClient }

func (emptyOperator) ListRegions(context.Context, *ctrlv1.ListRegionsRequest, ...grpc.CallOption) (*ctrlv1.ListRegionsResponse, error) {
	return &ctrlv1.ListRegionsResponse{}, nil
}

// With stdout a pipe (`task dev 2>&1 | tee dev.log`), the console draws on
// the terminal it opens, and nothing of it goes into the pipe.
func TestConsoleDrawsOnTheTerminalWhenStdoutIsAPipe(t *testing.T) {
	console, test := openPTY(t)
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipeR.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, New(emptyOperator{}, Options{NoColor: true}), pipeW,
			func() (*os.File, *os.File, error) { return console, console, nil })
		pipeW.Close()
	}()
	// Read in the background: a pseudo-terminal's reads take no deadline.
	chunks := make(chan []byte, 64)
	go func() {
		for {
			buf := make([]byte, 4096)
			n, err := test.Read(buf)
			if err != nil {
				close(chunks)
				return
			}
			chunks <- buf[:n]
		}
	}()
	var drawn bytes.Buffer
	timeout := time.After(20 * time.Second)
	for !strings.Contains(drawn.String(), "no regions yet") {
		select {
		case chunk, ok := <-chunks:
			if !ok {
				t.Fatalf("the terminal closed; drawn: %q", drawn.String())
			}
			drawn.Write(chunk)
		case <-timeout:
			t.Fatalf("the console drew nothing on the terminal: %q", drawn.String())
		}
	}
	test.Write([]byte("q"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if piped, _ := os.ReadFile("/dev/fd/" + fmt.Sprint(pipeR.Fd())); len(piped) > 0 {
		t.Fatalf("the console wrote into the pipe: %q", piped)
	}
}

// With no terminal at all, the console refuses, saying why and what to do,
// instead of running blind.
func TestConsoleRefusesWithoutATerminal(t *testing.T) {
	_, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipeW.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a console run blind would wait for keys
	defer cancel()
	err = run(ctx, New(emptyOperator{}, Options{}), pipeW,
		func() (*os.File, *os.File, error) {
			return nil, nil, errors.New("open /dev/tty: no such device or address")
		})
	if !errors.Is(err, ErrNoTerminal) || !strings.Contains(err.Error(), "script command") {
		t.Fatalf("got %v", err)
	}
}
