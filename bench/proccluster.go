package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// ProcessClusterOptions describes router replicas run as separate
// processes on loopback: the first embeds NATS (JetStream), the others use
// it, and all join one memberlist cluster.
type ProcessClusterOptions struct {
	// Command is the argv prefix that runs replica.Serve.
	Command []string
	Env     []string
	// Replicas started at once (AddReplica starts more later).
	Replicas int
	// CPUPerReplica caps each replica's CPU (cores); 0 = no cap.
	CPUPerReplica float64
	// Args are extra `kvrouter serve` flags given to every replica.
	Args []string
	// Dir holds the NATS store and the replicas' logs.
	Dir string
	// Fast selects memberlist's fast failure detection (--cluster-fast).
	Fast bool
	// NoGossip starts independent replicas (no memberlist, no shared
	// load view): a baseline that isolates what gossip costs.
	NoGossip bool
	// EPP starts each replica's gateway endpoint picker on a loopback
	// port of its own (ReplicaProcess.EPPAddr).
	EPP bool
	// GRPC serves each replica's gRPC API on a loopback port of its own
	// (ReplicaProcess.GRPCAddr).
	GRPC bool
}

// ProcessCluster is a running set of replica processes.
type ProcessCluster struct {
	opts     ProcessClusterOptions
	Replicas []*ReplicaProcess
	NATSURL  string
	seed     string // the first replica's cluster address
}

// StartProcessCluster starts the replicas and waits until every one is
// ready; on error it stops what it started.
func StartProcessCluster(ctx context.Context, opts ProcessClusterOptions) (_ *ProcessCluster, err error) {
	if opts.Replicas < 1 {
		return nil, fmt.Errorf("process cluster: need at least one replica, got %d", opts.Replicas)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("process cluster: %w", err)
	}
	natsPort, err := FreeLoopbackPort()
	if err != nil {
		return nil, err
	}
	c := &ProcessCluster{opts: opts, NATSURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort)}
	defer func() {
		if err != nil {
			_ = c.Close(context.Background())
		}
	}()
	// The seed first: the others join it (and read its NATS) at start.
	if _, err := c.AddReplica(ctx); err != nil {
		return nil, err
	}
	for range opts.Replicas - 1 {
		if _, err := c.start(); err != nil {
			return nil, err
		}
	}
	for _, r := range c.Replicas[1:] {
		if err := r.WaitReady(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// AddReplica starts one more replica joining the running cluster and
// waits until it is ready (warm: index replayed, peers' load held).
// A replica whose port was taken before it could bind it is started again
// on new ports (the seed with a new NATS port too), up to three times.
func (c *ProcessCluster) AddReplica(ctx context.Context) (*ReplicaProcess, error) {
	for attempt := 1; ; attempt++ {
		r, err := c.start()
		if err != nil {
			return nil, err
		}
		err = r.WaitReady(ctx)
		if !errors.Is(err, ErrPortTaken) || attempt == 3 {
			return r, err
		}
		c.Replicas = c.Replicas[:len(c.Replicas)-1]
		if len(c.Replicas) == 0 {
			natsPort, perr := FreeLoopbackPort()
			if perr != nil {
				return nil, perr
			}
			c.NATSURL = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
		}
	}
}

func (c *ProcessCluster) start() (*ReplicaProcess, error) {
	i := len(c.Replicas)
	name := "r" + strconv.Itoa(i)
	httpPort, err := FreeLoopbackPort()
	if err != nil {
		return nil, err
	}
	gossipPort, err := FreeLoopbackPort()
	if err != nil {
		return nil, err
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	gossipAddr := fmt.Sprintf("127.0.0.1:%d", gossipPort)
	args := []string{"--http-addr", httpAddr, "--replica-id", name}
	if !c.opts.NoGossip {
		args = append(args, "--cluster-bind", gossipAddr)
	}
	if c.opts.Fast {
		args = append(args, "--cluster-fast")
	}
	if i == 0 {
		args = append(args, "--nats-listen", c.NATSURL[len("nats://"):], "--data-dir", filepath.Join(c.opts.Dir, "nats"))
		c.seed = gossipAddr
	} else {
		args = append(args, "--nats-url", c.NATSURL)
		if !c.opts.NoGossip {
			args = append(args, "--cluster-join", c.seed)
		}
	}
	eppAddr, err := optionalListener(c.opts.EPP, "--epp-addr", &args)
	if err != nil {
		return nil, err
	}
	grpcAddr, err := optionalListener(c.opts.GRPC, "--grpc-addr", &args)
	if err != nil {
		return nil, err
	}
	args = append(args, c.opts.Args...)
	r, err := StartReplicaProcess(name, ProcessOptions{
		Command: c.opts.Command, Args: args, HTTPAddr: httpAddr, Env: c.opts.Env,
		CPU: c.opts.CPUPerReplica, LogPath: filepath.Join(c.opts.Dir, name+".log"),
	})
	if err != nil {
		return nil, err
	}
	r.EPPAddr, r.GRPCAddr = eppAddr, grpcAddr
	c.Replicas = append(c.Replicas, r)
	return r, nil
}

// URLs are the replicas' HTTP base URLs.
func (c *ProcessCluster) URLs() []string {
	out := make([]string, len(c.Replicas))
	for i, r := range c.Replicas {
		out[i] = r.BaseURL
	}
	return out
}

// Close stops every replica gracefully, the NATS host last.
func (c *ProcessCluster) Close(ctx context.Context) error {
	var errs []error
	for i := len(c.Replicas) - 1; i >= 0; i-- {
		errs = append(errs, c.Replicas[i].Stop(ctx))
	}
	return errors.Join(errs...)
}

// optionalListener picks a free loopback address for a listener the
// replica opens only when asked (on), and adds its flag to args; "" when
// not asked.
func optionalListener(on bool, flag string, args *[]string) (string, error) {
	if !on {
		return "", nil
	}
	port, err := FreeLoopbackPort()
	if err != nil {
		return "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	*args = append(*args, flag, addr)
	return addr, nil
}
