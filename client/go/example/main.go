// Command example sorts random keys with sortd from Go: one Sort call with
// a permutation, the answer checked, and what served it printed.
//
//	go run ./example -target=127.0.0.1:50051 -keys=100000
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"sort"
	"time"

	"sortd.io/client/go/sortd"
	sortdv1 "sortd.io/client/go/sortdv1"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "sortd's address")
	n := flag.Int("keys", 100000, "random uint32 keys to sort")
	flag.Parse()

	// Plaintext; sortd.Options.Credentials takes TLS credentials.
	conn, err := sortd.Dial(*target, sortd.Options{})
	if err != nil {
		log.Fatalf("dial %s: %v", *target, err)
	}
	defer conn.Close()
	client := sortdv1.NewSortServiceClient(conn)

	keys := make([]uint32, *n)
	for i := range keys {
		keys[i] = rand.Uint32() % 1000 // repeats, so that stability shows
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := client.Sort(ctx, &sortdv1.SortRequest{
		Keys:              &sortdv1.SortRequest_U32Keys{U32Keys: sortd.PackU32(keys)},
		ReturnPermutation: true,
	})
	if err != nil {
		log.Fatalf("Sort: %v", err)
	}

	sorted, err := sortd.UnpackU32(resp.GetU32Keys())
	if err != nil {
		log.Fatalf("keys: %v", err)
	}
	perm, err := sortd.UnpackU32(resp.GetPermutation())
	if err != nil {
		log.Fatalf("permutation: %v", err)
	}
	if len(sorted) != len(keys) || len(perm) != len(keys) {
		log.Fatalf("%d keys and %d indices back for %d keys",
			len(sorted), len(perm), len(keys))
	}
	want := make([]int, len(keys))
	for i := range want {
		want[i] = i
	}
	sort.SliceStable(want, func(a, b int) bool { return keys[want[a]] < keys[want[b]] })
	for i, w := range want {
		if sorted[i] != keys[w] || int(perm[i]) != w {
			log.Fatalf("position %d: key %d from %d, want %d from %d",
				i, sorted[i], perm[i], keys[w], w)
		}
	}
	by := resp.GetServedBy()
	fmt.Printf("sorted %d keys, verified: path %v, device %q, %.3f ms computing\n",
		len(keys), by.GetPath(), by.GetDevice(), float64(by.GetComputeNs())/1e6)
}
