// Package routeapi holds the rules the two routing APIs share, the JSON
// one (httpapi) and the gRPC one (grpcapi): what a route, lifecycle or
// token query must satisfy, how a route request becomes the router's
// message, and what each router error means to a client (an HTTP status
// and a gRPC code with the same message). Both APIs call it, so a rule
// changes in one place and the two cannot drift apart.
package routeapi
