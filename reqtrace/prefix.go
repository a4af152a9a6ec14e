package reqtrace

import "container/list"

// Reuse is what a prefix cache could skip of a set of requests' prefill.
type Reuse struct {
	InputTokens int64 // every request's prompt tokens
	Hit         int64 // prompt tokens whose KV the cache held
	// CapacityBlocks is each instance's cache size in prefix blocks (0:
	// unbounded).
	CapacityBlocks int
}

// Share is Hit / InputTokens (0 for none).
func (u Reuse) Share() float64 {
	if u.InputTokens == 0 {
		return 0
	}
	return float64(u.Hit) / float64(u.InputTokens)
}

// PrefixReuse is what a prefix cache of capacity prefix blocks (0:
// unbounded) on each of instances instances could skip of reqs' prefill,
// request i going to instance i % instances (the runtime's routing). Each
// instance keeps an LRU over blocks of blockTokens tokens: a request hits
// the leading run of its block ids the cache holds (a prefix is reusable
// only up to its first miss), skips those tokens but the last of its
// prompt (a prefill computes at least one token), then every one of its
// blocks becomes the most recently used, evicting the least. A request
// counts only the ids its Input covers (a prompt clipped to fit the pools
// computes, and could cache, only those). Requests without block ids hit
// nothing.
func PrefixReuse(reqs []Request, instances, capacity, blockTokens int) Reuse {
	instances = max(instances, 1)
	caches := make([]*lru, instances)
	for i := range caches {
		caches[i] = &lru{cap: capacity, at: map[uint64]*list.Element{}}
	}
	u := Reuse{CapacityBlocks: capacity}
	for i, r := range reqs {
		c := caches[i%instances]
		u.InputTokens += int64(r.Input)
		// The blocks of the prompt as prefilled (a clipped prompt's
		// first ids only): a block never computed is never cached.
		ids := r.Blocks[:min(len(r.Blocks), (r.Input+blockTokens-1)/blockTokens)]
		lead := 0
		for _, id := range ids {
			if _, ok := c.at[id]; !ok {
				break
			}
			lead++
		}
		u.Hit += int64(min(lead*blockTokens, r.Input-1))
		for _, id := range ids {
			c.touch(id)
		}
	}
	return u
}

// lru is a least-recently-used set of block ids (cap 0: unbounded).
type lru struct {
	cap   int
	order list.List // front: most recent
	at    map[uint64]*list.Element
}

func (c *lru) touch(id uint64) {
	if e, ok := c.at[id]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.at[id] = c.order.PushFront(id)
	if c.cap > 0 && c.order.Len() > c.cap {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.at, old.Value.(uint64))
	}
}
