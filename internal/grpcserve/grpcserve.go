// Package grpcserve is the serving lifecycle the router's two gRPC front
// ends share (the routing API, grpcapi, and the gateway endpoint picker,
// eppapi): serve until stopped, a health service that follows readiness,
// and a drain bounded by a context.
package grpcserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Lifecycle serves one grpc.Server. Its health service reports the
// Followers' status from Ready (re-read every second) and the Live
// services as always serving.
type Lifecycle struct {
	name      string
	srv       *grpc.Server
	health    *health.Server
	ready     func() error
	followers []string
	live      []string
	stop      chan struct{}
	once      sync.Once
}

// New returns the lifecycle of srv, whose errors name the front end
// (name). ready nil is always ready. The health service is registered on
// srv; followers are the service names whose status follows ready ("" is
// the server as a whole), live those that serve while the process runs.
func New(name string, srv *grpc.Server, ready func() error, followers, live []string) *Lifecycle {
	l := &Lifecycle{name: name, srv: srv, health: health.NewServer(), ready: ready,
		followers: followers, live: live, stop: make(chan struct{})}
	healthpb.RegisterHealthServer(srv, l.health)
	l.setHealth()
	return l
}

// Serve serves on ln until Stop; it returns nil after Stop.
func (l *Lifecycle) Serve(ln net.Listener) error {
	go l.watchReady()
	err := l.srv.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s serve: %w", l.name, err)
	}
	return nil
}

// Stop reports NOT_SERVING, lets calls in flight finish until ctx ends,
// then closes every connection (a stream a client keeps open would
// otherwise hold the shutdown forever).
func (l *Lifecycle) Stop(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	l.health.Shutdown()
	finished := make(chan struct{})
	go func() {
		l.srv.GracefulStop()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		l.srv.Stop()
		<-finished
		return fmt.Errorf("%s drain: %w", l.name, ctx.Err())
	}
}

// watchReady keeps the health service's status in step with Ready.
func (l *Lifecycle) watchReady() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.setHealth()
		}
	}
}

func (l *Lifecycle) setHealth() {
	st := healthpb.HealthCheckResponse_SERVING
	if l.ready != nil && l.ready() != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range l.live {
		l.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	for _, name := range l.followers {
		l.health.SetServingStatus(name, st)
	}
}
