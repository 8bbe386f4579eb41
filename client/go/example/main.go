// Command example sorts random keys with sortd from Go: one Sort call with
// a permutation, the answer checked, and what served it printed.
//
//	go run ./example -target=127.0.0.1:50051 -keys=100000
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"sort"
	"time"

	"google.golang.org/grpc"

	sortdv1 "sortd.io/client/go/sortdv1"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "sortd's address")
	n := flag.Int("keys", 100000, "random uint32 keys to sort")
	flag.Parse()

	conn, err := grpc.Dial(*target,
		grpc.WithInsecure(), // plaintext; see grpc.WithTransportCredentials for TLS
		// Answers can be twice a request (a permutation adds 4 bytes a key).
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		log.Fatalf("dial %s: %v", *target, err)
	}
	defer conn.Close()
	client := sortdv1.NewSortServiceClient(conn)

	keys := make([]uint32, *n)
	packed := make([]byte, 4*len(keys))
	for i := range keys {
		keys[i] = rand.Uint32() % 1000 // repeats, so that stability shows
		binary.LittleEndian.PutUint32(packed[4*i:], keys[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := client.Sort(ctx, &sortdv1.SortRequest{
		Keys:              &sortdv1.SortRequest_U32Keys{U32Keys: packed},
		ReturnPermutation: true,
	})
	if err != nil {
		log.Fatalf("Sort: %v", err)
	}

	sorted := resp.GetU32Keys()
	perm := resp.GetPermutation()
	if len(sorted) != len(packed) || len(perm) != len(packed) {
		log.Fatalf("answer of %d key bytes and %d permutation bytes for %d keys",
			len(sorted), len(perm), len(keys))
	}
	want := make([]int, len(keys))
	for i := range want {
		want[i] = i
	}
	sort.SliceStable(want, func(a, b int) bool { return keys[want[a]] < keys[want[b]] })
	for i, w := range want {
		k := binary.LittleEndian.Uint32(sorted[4*i:])
		p := binary.LittleEndian.Uint32(perm[4*i:])
		if k != keys[w] || int(p) != w {
			log.Fatalf("position %d: key %d from %d, want %d from %d", i, k, p, keys[w], w)
		}
	}
	by := resp.GetServedBy()
	fmt.Printf("sorted %d keys, verified: path %v, device %q, %.3f ms computing\n",
		len(keys), by.GetPath(), by.GetDevice(), float64(by.GetComputeNs())/1e6)
}
