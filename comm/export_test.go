package comm

// The backends' capabilities that comm looks for by method set, named for
// the external tests that check each backend has them (comm's own API
// leaves them unexported: only backends implement them).
type (
	BoundedForTest       = boundedComm
	InspectorForTest     = inspector
	MembersForTest       = members
	CollectivesForTest   = collectives
	StampComparerForTest = stampComparer
	ClockedForTest       = clocked
)
