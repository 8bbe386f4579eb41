package sortd

import (
	"context"
	"math/rand"
	"net"
	"os"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sortdv1 "sortd.io/client/go/sortdv1"
)

func TestPackAndUnpack(t *testing.T) {
	keys := []uint32{0, 1, 0xdeadbeef, 0xffffffff}
	packed := PackU32(keys)
	if want := []byte{0, 0, 0, 0, 1, 0, 0, 0, 0xef, 0xbe, 0xad, 0xde,
		0xff, 0xff, 0xff, 0xff}; string(packed) != string(want) {
		t.Fatalf("PackU32(%v) = %x, want %x", keys, packed, want)
	}
	back, err := UnpackU32(packed)
	if err != nil || len(back) != len(keys) {
		t.Fatalf("UnpackU32: %v, %v", back, err)
	}
	for i := range keys {
		if back[i] != keys[i] {
			t.Fatalf("UnpackU32: %v, want %v", back, keys)
		}
	}
	if _, err := UnpackU32(packed[:5]); err == nil {
		t.Fatal("UnpackU32 of 5 bytes: no error")
	}
}

func TestBadOptionsAreRefused(t *testing.T) {
	for _, o := range []Options{
		{MaxAttempts: 6}, {MaxAttempts: -1},
		{LoadBalancing: `round_robin"}]`},
	} {
		if conn, err := Dial("127.0.0.1:1", o); err == nil {
			conn.Close()
			t.Errorf("Dial with %+v: no error", o)
		}
	}
	// gRPC parses the default service config when dialing: an error here
	// would be a config gRPC cannot read.
	for _, o := range []Options{{}, {MaxAttempts: 1}, {LoadBalancing: "pick_first"}} {
		conn, err := Dial("127.0.0.1:1", o)
		if err != nil {
			t.Fatalf("Dial with %+v: %v", o, err)
		}
		conn.Close()
	}
}

// refusingServer refuses its first calls, UNAVAILABLE then
// RESOURCE_EXHAUSTED, and echoes the keys of the rest.
type refusingServer struct {
	sortdv1.UnimplementedSortServiceServer
	refusals int32
	calls    int32
}

func (s *refusingServer) Sort(ctx context.Context, req *sortdv1.SortRequest) (*sortdv1.SortResponse, error) {
	n := atomic.AddInt32(&s.calls, 1)
	if n <= s.refusals {
		if n%2 == 1 {
			return nil, status.Error(codes.Unavailable, "draining")
		}
		return nil, status.Error(codes.ResourceExhausted, "over capacity")
	}
	return &sortdv1.SortResponse{
		Keys: &sortdv1.SortResponse_U32Keys{U32Keys: req.GetU32Keys()}}, nil
}

func startRefusingServer(t *testing.T, refusals int32) (*refusingServer, string) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impl := &refusingServer{refusals: refusals}
	server := grpc.NewServer()
	sortdv1.RegisterSortServiceServer(server, impl)
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	return impl, listener.Addr().String()
}

func sortOnce(t *testing.T, target string, o Options) error {
	t.Helper()
	conn, err := Dial(target, o)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = sortdv1.NewSortServiceClient(conn).Sort(ctx, &sortdv1.SortRequest{
		Keys: &sortdv1.SortRequest_U32Keys{U32Keys: PackU32([]uint32{2, 1})}})
	return err
}

func TestRefusedCallsAreRetried(t *testing.T) {
	impl, target := startRefusingServer(t, 2)
	err := sortOnce(t, target, Options{})
	calls := atomic.LoadInt32(&impl.calls)
	if err != nil && calls == 1 && os.Getenv("GRPC_GO_RETRY") != "on" {
		t.Skip("this gRPC-Go retries only with GRPC_GO_RETRY=on: ", err)
	}
	if err != nil || calls != 3 {
		t.Fatalf("after %d calls: %v; want success on the third", calls, err)
	}
}

func TestOneAttemptIsNotRetried(t *testing.T) {
	impl, target := startRefusingServer(t, 2)
	err := sortOnce(t, target, Options{MaxAttempts: 1})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want UNAVAILABLE", err)
	}
	if calls := atomic.LoadInt32(&impl.calls); calls != 1 {
		t.Fatalf("%d calls, want 1", calls)
	}
}

// TestSortAgainstSortd sorts with a permutation on the sortd at
// $SORTD_TARGET (tests/go_client_test.sh starts one) and checks the
// answer against a stable sort here.
func TestSortAgainstSortd(t *testing.T) {
	target := os.Getenv("SORTD_TARGET")
	if target == "" {
		t.Skip("SORTD_TARGET is not set")
	}
	conn, err := Dial(target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	random := rand.New(rand.NewSource(1))
	keys := make([]uint32, 300000)
	for i := range keys {
		keys[i] = random.Uint32() % 5000 // repeats, so that stability shows
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := sortdv1.NewSortServiceClient(conn).Sort(ctx, &sortdv1.SortRequest{
		Keys:              &sortdv1.SortRequest_U32Keys{U32Keys: PackU32(keys)},
		ReturnPermutation: true,
	})
	if err != nil {
		t.Fatalf("Sort: %v", err)
	}
	sorted, err := UnpackU32(resp.GetU32Keys())
	if err != nil {
		t.Fatal(err)
	}
	perm, err := UnpackU32(resp.GetPermutation())
	if err != nil {
		t.Fatal(err)
	}
	if len(sorted) != len(keys) || len(perm) != len(keys) {
		t.Fatalf("%d keys and %d indices back for %d keys", len(sorted), len(perm), len(keys))
	}
	want := make([]uint32, len(keys))
	for i := range want {
		want[i] = uint32(i)
	}
	sort.SliceStable(want, func(a, b int) bool { return keys[want[a]] < keys[want[b]] })
	for i, w := range want {
		if sorted[i] != keys[w] || perm[i] != w {
			t.Fatalf("position %d: key %d from %d, want %d from %d",
				i, sorted[i], perm[i], keys[w], w)
		}
	}
}
