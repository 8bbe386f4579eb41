// Package sortd dials sortd with the settings its other clients use (the
// C++ client and the Python package): no limit on the size of answers, a
// load-balancing policy over every address the target resolves to
// (round_robin unless told otherwise), calls refused while a server is
// unreachable or draining (UNAVAILABLE) or overloaded (RESOURCE_EXHAUSTED)
// tried again with back-off, and keepalive pings at an interval the server
// accepts. It also packs and unpacks the little-endian arrays that
// sortd.proto's bytes fields carry.
//
//	conn, err := sortd.Dial("127.0.0.1:50051", sortd.Options{})
//	client := sortdv1.NewSortServiceClient(conn)
//
// gRPC-Go before 1.41 (Debian 12 packages 1.33.3) applies the service
// config's retry policy only when the environment has GRPC_GO_RETRY=on;
// later versions retry by default.
package sortd

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Options are Dial's settings; the zero value is plaintext, round_robin,
// four attempts a call and keepalive pings every 30 s.
type Options struct {
	// Credentials for TLS (e.g. credentials.NewClientTLSFromFile); nil
	// dials in plaintext.
	Credentials credentials.TransportCredentials
	// LoadBalancing names the load-balancing policy over the target's
	// addresses; empty means round_robin.
	LoadBalancing string
	// MaxAttempts is how many times a call refused with UNAVAILABLE or
	// RESOURCE_EXHAUSTED is made in all, 1 (no retries) to 5; 0 means 4.
	MaxAttempts int
	// KeepaliveTime is how long a connection with calls open may be quiet
	// before the client pings it; 0 means 30 s, a negative value sends no
	// pings. sortd closes connections that ping more often than its
	// --grpc_min_ping_interval (10 s by default); gRPC-Go raises anything
	// under 10 s to 10 s.
	KeepaliveTime time.Duration
}

const (
	defaultMaxAttempts   = 4
	defaultKeepaliveTime = 30 * time.Second
)

// ServiceConfig is the default service config Dial gives the channel: the
// load-balancing policy and, with maxAttempts above 1, the retry policy
// for sortd.v1.SortService and grpc.health.v1.Health. gRPC waits the
// server's retry pushback where an answer carries one.
func ServiceConfig(policy string, maxAttempts int) (string, error) {
	if policy == "" {
		policy = "round_robin"
	}
	for _, c := range policy {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' ||
			c >= '0' && c <= '9') {
			return "", fmt.Errorf("load balancing %q is not a policy name", policy)
		}
	}
	if maxAttempts < 1 || maxAttempts > 5 {
		return "", fmt.Errorf("max attempts %d: expected 1 to 5", maxAttempts)
	}
	config := fmt.Sprintf(`{"loadBalancingConfig": [{%q: {}}]`, policy)
	if maxAttempts > 1 {
		config += fmt.Sprintf(`, "methodConfig": [{"name": [`+
			`{"service": "sortd.v1.SortService"}, {"service": "grpc.health.v1.Health"}], `+
			`"retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.1s", `+
			`"maxBackoff": "2s", "backoffMultiplier": 2, `+
			`"retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]`,
			maxAttempts)
	}
	return config + "}", nil
}

// DialOptions are the grpc.DialOptions Dial uses, for callers that dial
// themselves (grpc.DialContext, grpc.WithBlock, interceptors): extra ones
// are appended after them, so they win where they conflict. Credentials go
// in Options, not in extra: gRPC refuses a channel with both plaintext and
// transport credentials.
func DialOptions(o Options, extra ...grpc.DialOption) ([]grpc.DialOption, error) {
	attempts := o.MaxAttempts
	if attempts == 0 {
		attempts = defaultMaxAttempts
	}
	config, err := ServiceConfig(o.LoadBalancing, attempts)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithDefaultServiceConfig(config),
		// Answers can be twice a request (a permutation adds 4 bytes a
		// key); gRPC's 4 MiB default would refuse a 1M-key sort.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32),
			grpc.MaxCallSendMsgSize(math.MaxInt32)),
	}
	if o.Credentials != nil {
		opts = append(opts, grpc.WithTransportCredentials(o.Credentials))
	} else {
		// gRPC-Go 1.33 has no credentials/insecure package (later versions
		// have it); WithInsecure is that version's way to dial in plaintext.
		opts = append(opts, grpc.WithInsecure())
	}
	switch {
	case o.KeepaliveTime == 0:
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: defaultKeepaliveTime}))
	case o.KeepaliveTime > 0:
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: o.KeepaliveTime}))
	}
	return append(opts, extra...), nil
}

// Dial opens a channel to target (host:port, dns:///name:port,
// unix:path, ...) with Options' settings and any extra grpc.DialOptions.
// Like grpc.Dial it does not wait for a connection: the first call does.
func Dial(target string, o Options, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts, err := DialOptions(o, extra...)
	if err != nil {
		return nil, err
	}
	return grpc.Dial(target, opts...)
}
