package routeapi

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/kvrouter/kvrouter/actors"
)

// StatusClientClosed is nginx's 499: the client left before the answer
// (nobody reads it; it shows in logs and metrics).
const StatusClientClosed = 499

// Failure is what a failed call means to a client: the HTTP status, the
// gRPC code and the message both carry.
type Failure struct {
	HTTPStatus int
	Code       codes.Code
	Message    string
	// Queue is set when a route was refused because every eligible
	// worker's queue was full.
	Queue *Queue
	// Unexpected: not one of the router's typed errors (log it).
	Unexpected bool
	// Reason names the bound a refusal hit (Reason*; "" for others).
	Reason string
}

// Queue is the backpressure queue at a refusal.
type Queue struct {
	Depth, Limit int
}

// Invalid is the failure of a request that breaks a rule of this package.
func Invalid(err error) Failure {
	return Failure{HTTPStatus: http.StatusBadRequest, Code: codes.InvalidArgument, Message: err.Error()}
}

// TooLarge is the failure of a body or message over the size limit.
func TooLarge(msg string) Failure {
	return Failure{HTTPStatus: http.StatusRequestEntityTooLarge, Code: codes.ResourceExhausted, Message: msg}
}

// Classify maps an error of the router's façade (actors.Router) to what
// a client is told.
func Classify(err error) Failure {
	f := func(status int, code codes.Code, msg string) Failure {
		return Failure{HTTPStatus: status, Code: code, Message: msg}
	}
	var re *actors.RouteError
	switch {
	case errors.As(err, &re) && errors.Is(err, actors.ErrOverloaded):
		out := f(http.StatusTooManyRequests, codes.ResourceExhausted, re.Message)
		out.Queue = &Queue{Depth: re.QueueDepth, Limit: re.QueueLimit}
		return out
	case errors.Is(err, actors.ErrNoEligibleWorker):
		return f(http.StatusServiceUnavailable, codes.Unavailable, err.Error())
	case errors.Is(err, actors.ErrUnknownRequest):
		return f(http.StatusNotFound, codes.NotFound, err.Error())
	case errors.Is(err, actors.ErrBadRequest):
		return f(http.StatusBadRequest, codes.InvalidArgument, err.Error())
	case errors.Is(err, actors.ErrClientLimit):
		out := f(http.StatusTooManyRequests, codes.ResourceExhausted, err.Error())
		out.Reason = ReasonClientActive
		return out
	case errors.Is(err, actors.ErrLimit):
		return f(http.StatusTooManyRequests, codes.ResourceExhausted, err.Error())
	case errors.Is(err, actors.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return f(http.StatusGatewayTimeout, codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return f(StatusClientClosed, codes.Canceled, "client closed the request")
	case errors.Is(err, actors.ErrStopped):
		return f(http.StatusServiceUnavailable, codes.Unavailable, "router is shutting down")
	default:
		out := f(http.StatusInternalServerError, codes.Internal, err.Error())
		out.Unexpected = true
		return out
	}
}

// Messages of the client-token check, the same over both APIs.
const (
	MsgTokenMissing = "missing bearer token (send Authorization: Bearer <a token of --api-token-file>)"
	MsgTokenInvalid = "invalid bearer token"
)
