// A resource provider compiled from Go that does nothing: the floor a compiled plugin would give
// the control plane. benchmarks/control_plane.py builds it and times a program with one of its
// resources next to the empty program and the one-dynamic-resource program. Its resources keep
// their inputs as their state; a Read returns the state unchanged, a Diff compares the inputs.
package main

import (
	"context"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	rpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

type floor struct {
	rpc.UnimplementedResourceProviderServer
}

func (floor) GetPluginInfo(context.Context, *emptypb.Empty) (*rpc.PluginInfo, error) {
	return &rpc.PluginInfo{Version: "0.0.1"}, nil
}

func (floor) CheckConfig(_ context.Context, req *rpc.CheckRequest) (*rpc.CheckResponse, error) {
	return &rpc.CheckResponse{Inputs: req.GetNews()}, nil
}

func (floor) DiffConfig(context.Context, *rpc.DiffRequest) (*rpc.DiffResponse, error) {
	return &rpc.DiffResponse{Changes: rpc.DiffResponse_DIFF_NONE}, nil
}

func (floor) Configure(context.Context, *rpc.ConfigureRequest) (*rpc.ConfigureResponse, error) {
	return &rpc.ConfigureResponse{AcceptSecrets: true, SupportsPreview: true}, nil
}

func (floor) Check(_ context.Context, req *rpc.CheckRequest) (*rpc.CheckResponse, error) {
	return &rpc.CheckResponse{Inputs: req.GetNews()}, nil
}

func (floor) Diff(_ context.Context, req *rpc.DiffRequest) (*rpc.DiffResponse, error) {
	if proto.Equal(req.GetOlds(), req.GetNews()) {
		return &rpc.DiffResponse{Changes: rpc.DiffResponse_DIFF_NONE}, nil
	}
	return &rpc.DiffResponse{Changes: rpc.DiffResponse_DIFF_SOME}, nil
}

func (floor) Create(_ context.Context, req *rpc.CreateRequest) (*rpc.CreateResponse, error) {
	return &rpc.CreateResponse{Id: "floor", Properties: req.GetProperties()}, nil
}

func (floor) Read(_ context.Context, req *rpc.ReadRequest) (*rpc.ReadResponse, error) {
	return &rpc.ReadResponse{Id: req.GetId(), Properties: req.GetProperties(), Inputs: req.GetInputs()}, nil
}

func (floor) Update(_ context.Context, req *rpc.UpdateRequest) (*rpc.UpdateResponse, error) {
	return &rpc.UpdateResponse{Properties: req.GetNews()}, nil
}

func (floor) Delete(context.Context, *rpc.DeleteRequest) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (floor) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func main() {
	err := provider.Main("floor", func(*provider.HostClient) (rpc.ResourceProviderServer, error) {
		return floor{}, nil
	})
	if err != nil {
		panic(err)
	}
}
