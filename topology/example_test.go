package topology_test

import (
	"fmt"

	"github.com/rankrun/rankrun/topology"
)

func ExampleMap() {
	ctx, _ := topology.ParseLayout("tp=1")
	gen, _ := topology.ParseLayout("tp=4")
	m := topology.DefaultModel() // 8 layers, 8 KV heads
	mp, err := topology.Map(ctx, gen, m)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range mp.Fragments(0, 0) {
		fmt.Println(f, mp.FragmentBytes(f, f.BlockCount(m.Blocks(100))), "bytes for 100 tokens")
	}
	// Output:
	// ctx 0 -> gen 0: layers [0,8) heads [0,2) blocks %1==0 458752 bytes for 100 tokens
	// ctx 0 -> gen 1: layers [0,8) heads [2,4) blocks %1==0 458752 bytes for 100 tokens
	// ctx 0 -> gen 2: layers [0,8) heads [4,6) blocks %1==0 458752 bytes for 100 tokens
	// ctx 0 -> gen 3: layers [0,8) heads [6,8) blocks %1==0 458752 bytes for 100 tokens
}

func ExampleLayout_Shard() {
	l, _ := topology.ParseLayout("tp=2,pp=2")
	s, _ := l.Shard(topology.DefaultModel(), 3)
	fmt.Println(s.Coord, "layers", s.LayerLo, s.LayerHi, "heads", s.HeadLo, s.HeadHi, "block bytes", s.BlockBytes())
	fmt.Println("offset of layer 5, V, head 6, token 1:", s.Offset(5, topology.V, 6, 1))
	// Output:
	// dp0/pp1/cp0/tp1 layers 4 8 heads 4 8 block bytes 65536
	// offset of layer 5, V, head 6, token 1: 28800
}
