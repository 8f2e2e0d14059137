package httpapi

// ReadyCondition is one condition /readyz reports: whether it holds and,
// when not, why. Some make the replica unready (cluster membership), some
// only say what is wrong (one client at its bound: the others are still
// served).
type ReadyCondition struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Reason string `json:"reason,omitempty"`
}

type readyBody struct {
	Status     string           `json:"status"`
	Reason     string           `json:"reason,omitempty"`
	Conditions []ReadyCondition `json:"conditions,omitempty"`
}
