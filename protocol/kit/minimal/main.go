// Command minimal is the smallest node the kit serves: one member, its
// registers in memory. docs/protocol.md shows it whole; replace the view
// and the map with your cluster's.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log"
	"os/signal"
	"sync"
	"syscall"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

func main() {
	cfg, err := kit.ConfigFromEnv() // SHARDTEST_NAME, SHARDTEST_HTTP, ...
	if err != nil {
		log.Fatal(err)
	}
	inc := rand.Text() // new at every start
	self := protocol.Member{UID: protocol.UID(cfg.Name, inc), Name: cfg.Name, Incarnation: inc, Status: protocol.StatusUp, Reachable: true}
	var mu sync.Mutex
	registers := map[string]*int64{}
	node := &kit.Node{
		Implementation: "minimal",
		Revision:       4, // the shardtest/1 revision this was written for
		Name:           cfg.Name,
		Incarnation:    func() string { return inc },
		View:           func() kit.View { return kit.View{Self: self, Members: []protocol.Member{self}} },
		EntityTypes:    []string{protocol.TypeRegister},
		Entity: func(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
			op, err := kit.ParseRegister(req.Op, req.Payload) // checked by the kit already: only read here
			if err != nil {
				return protocol.EntityReply{}, err
			}
			mu.Lock()
			defer mu.Unlock()
			v := registers[req.ID]
			res := protocol.RegisterResult{Value: v}
			ok := op.Op == protocol.OpWrite || op.Op == protocol.OpCAS && (v == nil && op.Expect == nil || v != nil && op.Expect != nil && *v == *op.Expect)
			if op.Op == protocol.OpCAS {
				res.OK = &ok
			}
			if ok {
				registers[req.ID], res.Value = &op.Value, &op.Value
			}
			result, err := json.Marshal(res)
			return protocol.EntityReply{Node: self.UID, EntityIncarnation: self.UID + "/" + req.ID, Result: result}, err
		},
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := kit.Serve(ctx, cfg.HTTP, node.Handler()); err != nil {
		log.Fatal(err)
	}
}
