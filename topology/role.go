package topology

import "fmt"

// Role says which instance a rank belongs to.
type Role uint8

// Roles.
const (
	Context    Role = iota + 1 // CTX: prefill, sends KV
	Generation                 // GEN: decode, receives KV
)

func (r Role) String() string {
	switch r {
	case Context:
		return "ctx"
	case Generation:
		return "gen"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// RoleOf maps a world rank to its role and instance rank: the world holds
// every CTX rank first, then every GEN rank.
func RoleOf(ctx, gen Layout, worldRank int) (Role, int) {
	if worldRank < ctx.Ranks() {
		return Context, worldRank
	}
	return Generation, worldRank - ctx.Ranks()
}

// WorldRank is the world rank of instance rank r of role (the inverse of
// RoleOf).
func WorldRank(ctx Layout, role Role, r int) int {
	if role == Generation {
		return ctx.Ranks() + r
	}
	return r
}
