package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	pb "github.com/kvrouter/kvrouter/messages/kvrouterv1"
	"github.com/kvrouter/kvrouter/routeapi"
)

// service implements kvrouter.v1.Router on the router's façade.
type service struct {
	pb.UnimplementedRouterServer
	s *Server
}

// failure is a routeapi failure as a gRPC status (the queue figures of a
// full queue as a QueueFull detail).
func (s *Server) failure(f routeapi.Failure) *status.Status {
	st := status.New(f.Code, f.Message)
	if f.Queue != nil {
		if d, err := st.WithDetails(&pb.QueueFull{QueueDepth: uint32(f.Queue.Depth), QueueLimit: uint32(f.Queue.Limit)}); err == nil {
			st = d
		}
	}
	return st
}

// routerError maps an error of the router's façade.
func (s *Server) routerError(err error) error {
	f := routeapi.Classify(err)
	if f.Unexpected {
		s.log.Error("router call failed", "err", err)
	}
	return s.failure(f).Err()
}

func invalid(err error) error { return status.Error(codes.InvalidArgument, err.Error()) }

// routeMessage is a Route request as the router's message. token_ids
// cannot be told missing from empty in proto3: empty is "must not be
// empty".
func routeMessage(r *pb.RouteRequest) (*messages.RouteRequest, error) {
	in := routeapi.Route{
		RequestID: r.GetRequestId(), Tokens: r.GetTokenIds(), HasTokens: true, LoraName: r.GetLoraName(),
		UpdateStates: r.UpdateStates, AllowedWorkerIDs: r.GetAllowedWorkerIds(),
		ExpectedOutputTokens: r.GetExpectedOutputTokens(), PriorityJump: r.GetPriorityJump(),
		Model: r.GetModel(), Explain: r.GetExplain(),
	}
	if p := r.GetPinnedWorker(); p != nil {
		in.Pinned = &messages.WorkerRank{WorkerId: p.WorkerId, DpRank: p.DpRank}
	}
	if o := r.GetRouterConfigOverride(); o != nil {
		in.Override = &messages.RouterConfigOverride{
			OverlapScoreWeight: o.OverlapScoreWeight, RouterTemperature: o.RouterTemperature,
			OverlapScoreCredit: o.OverlapScoreCredit, PrefillLoadScale: o.PrefillLoadScale,
			TrackPrefillTokens: o.TrackPrefillTokens, AssumeKvReuse: o.AssumeKvReuse,
			SharedCacheMultiplier: o.SharedCacheMultiplier,
		}
	}
	m, err := routeapi.RouteMessage(in)
	if err != nil {
		return nil, err
	}
	m.SessionId = r.GetSessionId() // checked by the scheduler, as over HTTP
	return m, nil
}

func (s *Server) route(ctx context.Context, r *pb.RouteRequest) (*pb.RouteResponse, error) {
	msg, err := routeMessage(r)
	if err != nil {
		return nil, invalid(err)
	}
	msg.Client = s.clientOf(ctx)
	reply, err := s.opts.Router.Route(ctx, msg)
	if err != nil {
		// A decision that timed out may still read the tokens later: the
		// buffer is not recycled.
		return nil, s.routerError(err)
	}
	// The scheduler replied, so it is done with the request's tokens.
	recycleTokens(r.TokenIds)
	r.TokenIds = nil
	res := &pb.RouteResponse{
		WorkerId: reply.Worker.GetWorkerId(), DpRank: reply.Worker.GetDpRank(),
		OverlapBlocks: reply.OverlapBlocks, CachedTokens: reply.CachedTokens,
		IndexTrust: s.indexTrust(reply.Worker), ReceiptJson: string(reply.ReceiptJson),
	}
	if pw := reply.PrefillWorker; pw != nil {
		res.PrefillWorker = &pb.WorkerRef{WorkerId: pw.WorkerId, DpRank: pw.DpRank}
		res.PrefillOverlapBlocks, res.PrefillCachedTokens = reply.PrefillOverlapBlocks, reply.PrefillCachedTokens
	}
	if msg.UpdateStates {
		res.RequestId = msg.RequestId
		if reply.PrefillWorker != nil {
			res.PrefillRequestId = reply.PrefillRequestId
		}
	}
	return res, nil
}

// indexTrust is the chosen rank's index trust as last published (exact,
// degraded or untrusted: docs/index-trust.md), as HTTP's /route answers it.
func (s *Server) indexTrust(w *messages.WorkerRank) string {
	return s.opts.Router.IndexTrust(kv.WorkerWithDpRank{WorkerID: kv.WorkerID(w.GetWorkerId()), DpRank: w.GetDpRank()}).State
}

// lifecycle runs prefill_done (prefill) or free.
func (s *Server) lifecycle(ctx context.Context, r *pb.RequestRef, prefill bool) (*pb.Ack, error) {
	id := r.GetRequestId()
	if err := routeapi.CheckRequestID(id); err != nil {
		return nil, invalid(err)
	}
	call := s.opts.Router.Free
	if prefill {
		call = s.opts.Router.MarkPrefillCompleted
	}
	if err := call(ctx, id); err != nil {
		return nil, s.routerError(err)
	}
	return &pb.Ack{RequestId: id}, nil
}

func (v *service) Route(ctx context.Context, r *pb.RouteRequest) (*pb.RouteResponse, error) {
	return v.s.route(ctx, r)
}

func (v *service) PrefillDone(ctx context.Context, r *pb.RequestRef) (*pb.Ack, error) {
	return v.s.acked(ctx, r, true)
}

func (v *service) Free(ctx context.Context, r *pb.RequestRef) (*pb.Ack, error) {
	return v.s.acked(ctx, r, false)
}

// acked runs prefill_done or free and answers once the step's gossip left
// for every peer (Router.Gossiped): a replica that dies after the answer
// cannot take the step along. A peer too slow to take it is counted and
// logged by the cluster; the step is done here either way.
func (s *Server) acked(ctx context.Context, r *pb.RequestRef, prefill bool) (*pb.Ack, error) {
	a, err := s.lifecycle(ctx, r, prefill)
	if err == nil {
		_ = s.opts.Router.Gossiped(ctx)
	}
	return a, err
}

func (v *service) OverlapScores(ctx context.Context, r *pb.TokensRequest) (*pb.OverlapScoresResponse, error) {
	if err := routeapi.CheckQueryTokens(r.GetTokenIds()); err != nil {
		return nil, invalid(err)
	}
	reply, err := v.s.opts.Router.OverlapScores(ctx, r.GetTokenIds(), r.GetLoraName())
	if err != nil {
		return nil, v.s.routerError(err) // a query that timed out may still read the tokens
	}
	recycleTokens(r.TokenIds) // answered: the scheduler is done with them
	r.TokenIds = nil
	cfg := v.s.opts.Router.Config().Scheduling
	ranks := reply.GetRanks()
	n := len(ranks.GetWorkerIds())
	res := &pb.OverlapScoresResponse{RequestBlocks: reply.RequestBlocks, SharedBlocks: reply.SharedBlocks,
		Scores: make([]*pb.OverlapRow, n)}
	rows := make([]pb.OverlapRow, n) // one allocation for the rows
	for i := range rows {
		device, host, disk := ranks.DeviceBlocks[i], ranks.HostBlocks[i], ranks.DiskBlocks[i]
		c := routeapi.CreditOf(cfg, v.s.opts.BlockSize, device, host, disk, reply.SharedBlocks)
		row := &rows[i]
		row.WorkerId, row.DpRank = ranks.WorkerIds[i], ranks.DpRanks[i]
		row.DeviceBlocks, row.HostBlocks, row.DiskBlocks = device, host, disk
		row.Credit, row.CachedTokens, row.TreeSize = c.Credit, c.CachedTokens, ranks.TreeSizes[i]
		row.SharedBeyondDeviceBlocks, row.SharedCreditBlocks = c.SharedBeyondDeviceBlocks, c.SharedCreditBlocks
		res.Scores[i] = row
	}
	return res, nil
}

func (v *service) PotentialLoads(ctx context.Context, r *pb.TokensRequest) (*pb.PotentialLoadsResponse, error) {
	if err := routeapi.CheckQueryTokens(r.GetTokenIds()); err != nil {
		return nil, invalid(err)
	}
	reply, err := v.s.opts.Router.PotentialLoads(ctx, r.GetTokenIds(), r.GetLoraName())
	if err != nil {
		return nil, v.s.routerError(err)
	}
	recycleTokens(r.TokenIds)
	r.TokenIds = nil
	res := &pb.PotentialLoadsResponse{Loads: make([]*pb.LoadRow, 0, len(reply.Loads))}
	for _, l := range reply.Loads {
		res.Loads = append(res.Loads, &pb.LoadRow{
			WorkerId: l.Worker.GetWorkerId(), DpRank: l.Worker.GetDpRank(),
			PotentialPrefillTokens: l.PotentialPrefillTokens, PotentialDecodeBlocks: l.PotentialDecodeBlocks,
			ActiveRequests: l.ActiveRequests,
		})
	}
	return res, nil
}

func (v *service) Workers(ctx context.Context, req *pb.WorkersRequest) (*pb.WorkersResponse, error) {
	st, err := v.s.opts.Router.Status(ctx, req.GetIndexDigest())
	if err != nil {
		return nil, v.s.routerError(err)
	}
	res := &pb.WorkersResponse{
		QueueDepth: st.QueueDepth, TrackedRequests: st.TrackedRequests, IndexCounters: st.IndexCounters,
		IndexDigest: st.IndexDigest, RegistryDigest: st.RegistryDigest, UnregisteredIndexed: st.UnregisteredIndexed,
		IndexTrustTransitions: st.IndexTrustTransitions,
	}
	for _, w := range st.Workers {
		ws := &pb.WorkerStatus{
			WorkerId: w.WorkerID, Url: w.URL, ModelName: w.ModelName,
			DataParallelStartRank: w.DataParallelStartRank, DataParallelSize: w.DataParallelSize,
			TotalKvBlocks: w.TotalKVBlocks, Static: w.Static, LastSeenUnixNano: w.LastSeenUnixNano,
			Draining: w.Draining, DrainingSinceUnixNano: w.DrainingSinceUnixNano, Unhealthy: w.Unhealthy,
			BusyRanks: w.BusyRanks,
		}
		for _, r := range w.Ranks {
			ws.Ranks = append(ws.Ranks, &pb.RankStatus{
				DpRank: r.DpRank, State: r.State, IndexedBlocks: r.IndexedBlocks, ActiveRequests: r.ActiveRequests,
				ActivePrefillTokens: r.ActivePrefillTokens, ActiveDecodeBlocks: r.ActiveDecodeBlocks,
				PrefillTokensPerSec: r.PrefillTokensPerSec,
				IndexTrust: &pb.IndexTrust{State: r.IndexTrust.State, Reason: r.IndexTrust.Reason, Detail: r.IndexTrust.Detail,
					SinceUnixNano: r.IndexTrust.SinceUnixNano},
			})
		}
		res.Workers = append(res.Workers, ws)
	}
	return res, nil
}

// errNoCall is a Lifecycle request that names no call.
var errNoCall = errors.New("lifecycle request names no call (route, prefill_done or free)")
