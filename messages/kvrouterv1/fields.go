package kvrouterv1

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers the hand-written codecs (grpcapi's decoder, kvclient's
// encoder) read and write directly. Written by hand (`make proto` leaves
// this file alone); TestFieldNumbersMatchTheProto checks them against the
// generated descriptors, so a renumbering in router.proto fails the tests.
const (
	RouteRequestTokenIDsField  protowire.Number = 2
	TokensRequestTokenIDsField protowire.Number = 1
	LifecycleRequestIDField    protowire.Number = 1
	LifecycleRequestRouteField protowire.Number = 2
)
