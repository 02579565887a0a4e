package sluicegrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	methodCheck = healthpb.Health_Check_FullMethodName
	methodWatch = healthpb.Health_Watch_FullMethodName
	methodChat  = "/sluice.test.Chat/Chat"
	// mdCode makes the test handlers end with the code it holds.
	mdCode = "x-test-code"
	// plainError in x-test-code makes a handler return a plain Go error,
	// which gRPC sends as Unknown.
	plainError codes.Code = 1000
	// mdSends makes Watch send that many messages before it ends.
	mdSends = "x-test-sends"
)

// health is the unary (Check) and server-streaming (Watch) service of the
// tests: it ends with the code of the x-test-code metadata, OK by default,
// and counts the calls that reached it.
type health struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int64
}

func codeFrom(ctx context.Context) error {
	v := metadata.ValueFromIncomingContext(ctx, mdCode)
	if len(v) == 0 {
		return nil
	}
	n, _ := strconv.Atoi(v[0])
	if n == 0 {
		return nil
	}
	if codes.Code(n) == plainError {
		return errors.New("plain handler error with an internal text")
	}
	return status.Error(codes.Code(n), "handler says "+codes.Code(n).String())
}

func (h *health) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.calls.Add(1)
	if err := codeFrom(ctx); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *health) Watch(_ *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	h.calls.Add(1)
	sends := 1
	if v := metadata.ValueFromIncomingContext(ss.Context(), mdSends); len(v) > 0 {
		sends, _ = strconv.Atoi(v[0])
	}
	for range sends {
		if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
			return err
		}
	}
	return codeFrom(ss.Context())
}

// chatDesc is a bidirectional stream registered by hand: it echoes every
// message, and ends with the x-test-code code when the client closes.
var chatDesc = grpc.ServiceDesc{
	ServiceName: "sluice.test.Chat",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Chat",
		Handler:       chatHandler,
		ServerStreams: true,
		ClientStreams: true,
	}},
}

// chatSwallows makes the chat handler ignore receive errors other than EOF
// and end with OK, to show that a message rejection still ends the stream.
const mdSwallow = "x-test-swallow"

func chatHandler(srv any, ss grpc.ServerStream) error {
	srv.(*health).calls.Add(1)
	swallow := len(metadata.ValueFromIncomingContext(ss.Context(), mdSwallow)) > 0
	for {
		var m wrapperspb.StringValue
		err := ss.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			return codeFrom(ss.Context())
		}
		if err != nil {
			if swallow {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}

var chatStreamDesc = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

// transport is how a test server is reached: bufconn or loopback TCP.
type transport struct {
	name   string
	listen func(t *testing.T) (net.Listener, []grpc.DialOption, string)
}

var bufnets atomic.Int64

var transports = []transport{
	{"bufconn", func(t *testing.T) (net.Listener, []grpc.DialOption, string) {
		l := bufconn.Listen(1 << 20)
		dial := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) })
		return l, []grpc.DialOption{dial}, "passthrough:///bufnet-" + strconv.FormatInt(bufnets.Add(1), 10)
	}},
	{"tcp", func(t *testing.T) (net.Listener, []grpc.DialOption, string) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return l, nil, "passthrough:///" + l.Addr().String()
	}},
}

// forEachTransport runs fn as a subtest over bufconn and over TCP.
func forEachTransport(t *testing.T, fn func(t *testing.T, tr transport)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { fn(t, tr) })
	}
}

// server is a running test server and a connection to it.
type server struct {
	health *health
	conn   *grpc.ClientConn
	target string
}

// endpoint is a listener not yet served, and how to dial it.
type endpoint struct {
	l      net.Listener
	dial   []grpc.DialOption
	target string
}

func listen(t *testing.T, tr transport) endpoint {
	t.Helper()
	l, dial, target := tr.listen(t)
	return endpoint{l: l, dial: dial, target: target}
}

// start serves the test services with sopts over tr, and dials it with
// copts; both are stopped when the test ends.
func start(t *testing.T, tr transport, sopts []grpc.ServerOption, copts ...grpc.DialOption) *server {
	t.Helper()
	return serve(t, listen(t, tr), sopts, copts...)
}

// serve serves the test services with sopts on e, and dials it with copts.
func serve(t *testing.T, e endpoint, sopts []grpc.ServerOption, copts ...grpc.DialOption) *server {
	t.Helper()
	s := grpc.NewServer(sopts...)
	h := &health{}
	healthpb.RegisterHealthServer(s, h)
	s.RegisterService(&chatDesc, h)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Serve(e.l) })
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, e.dial...)
	cc, err := grpc.NewClient(e.target, append(opts, copts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cc.Close()
		s.Stop()
		wg.Wait()
	})
	return &server{health: h, conn: cc, target: cc.Target()}
}

func withCode(ctx context.Context, c codes.Code) context.Context {
	return metadata.AppendToOutgoingContext(ctx, mdCode, strconv.Itoa(int(c)))
}

func (s *server) check(ctx context.Context, opts ...grpc.CallOption) error {
	_, err := healthpb.NewHealthClient(s.conn).Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

// watch opens a Watch stream and reads it to its end; it returns the
// messages received and the stream's final error (nil for OK).
func (s *server) watch(ctx context.Context, opts ...grpc.CallOption) (int, error) {
	st, err := healthpb.NewHealthClient(s.conn).Watch(ctx, &healthpb.HealthCheckRequest{}, opts...)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		_, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// chat sends msgs on a Chat stream, reading each echo, then closes and
// returns the echoes and the final error.
func (s *server) chat(ctx context.Context, msgs int) (int, error) {
	st, err := s.conn.NewStream(ctx, chatStreamDesc, methodChat)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range msgs {
		if err := st.SendMsg(wrapperspb.String("m" + strconv.Itoa(i))); err != nil {
			break // the status comes from RecvMsg
		}
		var m wrapperspb.StringValue
		if err := st.RecvMsg(&m); err != nil {
			return n, err
		}
		n++
	}
	if err := st.CloseSend(); err != nil {
		return n, err
	}
	for {
		var m wrapperspb.StringValue
		err := st.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// withTimeout is a context that gives up when a test is broken rather than
// making it hang.
func withTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recorder is a policy that admits everything and records the keys it saw
// and the outcomes it was told, in order.
type recorder struct {
	name     string
	mu       sync.Mutex
	keys     []string
	res      []string
	prios    []sluice.Priority
	outcomes []sluice.Outcome
	ended    chan sluice.Outcome // when set, receives every outcome
}

func (r *recorder) Name() string { return r.name }

func (r *recorder) Needs() sluice.Needs { return sluice.NeedsResource }

func (r *recorder) Admit(ctx context.Context, _ time.Duration) (sluice.Ticket, sluice.Quota, error) {
	k, _ := sluice.KeyFrom(ctx)
	res, _ := sluice.ResourceFrom(ctx)
	r.mu.Lock()
	r.keys = append(r.keys, k)
	r.res = append(r.res, res)
	r.prios = append(r.prios, sluice.PriorityFrom(ctx))
	r.mu.Unlock()
	return 0, sluice.Quota{Limit: -1}, nil
}

func (r *recorder) Done(_ sluice.Ticket, o sluice.Outcome, _, _ time.Duration) {
	r.mu.Lock()
	r.outcomes = append(r.outcomes, o)
	r.mu.Unlock()
	if r.ended != nil {
		r.ended <- o
	}
}

// next waits for the next outcome sent on r.ended, and fails the test when
// none comes in time.
func (r *recorder) next(t *testing.T) sluice.Outcome {
	t.Helper()
	select {
	case o := <-r.ended:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome was recorded")
		return 0
	}
}

func (r *recorder) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// Resources returns the resource of every admission, "" for none.
func (r *recorder) Resources() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.res...)
}

func (r *recorder) Priorities() []sluice.Priority {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sluice.Priority(nil), r.prios...)
}

func (r *recorder) Outcomes() []sluice.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sluice.Outcome(nil), r.outcomes...)
}

// refuser is a policy that rejects every request with its cause and delay
// while on, and admits otherwise: it stands for the load guard and the
// concurrency limit.
type refuser struct {
	name  string
	cause error
	retry time.Duration
	off   atomic.Bool
}

func (r *refuser) Name() string { return r.name }

func (r *refuser) Needs() sluice.Needs { return 0 }

func (r *refuser) Admit(context.Context, time.Duration) (sluice.Ticket, sluice.Quota, error) {
	if r.off.Load() {
		return 0, sluice.Quota{Limit: -1}, nil
	}
	return 0, sluice.Quota{Limit: -1, RetryAfter: r.retry}, r.cause
}

func (r *refuser) Done(sluice.Ticket, sluice.Outcome, time.Duration, time.Duration) {}

func mustGuard(t testing.TB, opts ...sluice.Option) *sluice.Guard {
	t.Helper()
	g, err := sluice.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func unary(t testing.TB, opts ...Option) grpc.UnaryServerInterceptor {
	t.Helper()
	i, err := UnaryServerInterceptor(opts...)
	require.NoError(t, err)
	return i
}

func stream(t testing.TB, opts ...Option) grpc.StreamServerInterceptor {
	t.Helper()
	i, err := StreamServerInterceptor(opts...)
	require.NoError(t, err)
	return i
}

func serverOpts(t testing.TB, opts ...Option) []grpc.ServerOption {
	t.Helper()
	return []grpc.ServerOption{grpc.UnaryInterceptor(unary(t, opts...)), grpc.StreamInterceptor(stream(t, opts...))}
}
