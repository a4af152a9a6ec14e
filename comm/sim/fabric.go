package sim

import "github.com/rankrun/rankrun/fabric"

// The link model lives in package fabric, shared with the cost model; these
// names keep Config.Fabric's spelling.
type (
	// Fabric is fabric.Fabric: the links a simulated world's ranks use.
	Fabric = fabric.Fabric
	// Link is fabric.Link.
	Link = fabric.Link
)

// Fabrics are fabric.Fabrics, the presets by name.
var Fabrics = fabric.Fabrics

// FabricNames lists the presets, sorted (fabric.Names).
func FabricNames() []string { return fabric.Names() }

// ParseFabric returns the named preset (fabric.Parse).
func ParseFabric(name string) (Fabric, error) { return fabric.Parse(name) }
