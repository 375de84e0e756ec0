// Command languagehost is the Python language host the Pulumi engine talks to when it runs this
// project with the CLI the bootstrap builds. Pulumi's own host (`pulumi-language-python`) is a Go
// module that no module registry serves, so the bootstrap builds this one under that name.
//
// It runs the program exactly as Pulumi's host does: the project's virtualenv Python runs the
// SDK's `pulumi-language-python-exec` script, with the stack config passed through PULUMI_CONFIG
// and PULUMI_CONFIG_SECRET_KEYS. It installs nothing (the bootstrap does) and reports no plugins
// (so the engine downloads none).
//
// It is written in Go because the engine starts it twice per pass: a Go process starts in a few
// milliseconds where a Python one with gRPC took about 0.15 CPU-s.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

const (
	hostVersion = "0.1.0"
	// pulumi-language-python-exec exits with this code after it has shown the user an error.
	exitErrorAlreadyShown = 32
	// How often the host asks whether its engine still listens (see watchEngine).
	enginePoll = 2 * time.Second
)

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	mu            sync.Mutex
	engineAddress string
	programs      map[*exec.Cmd]struct{}
}

func (h *host) engine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.engineAddress
}

func (h *host) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	if req.GetEngineAddress() != "" {
		h.mu.Lock()
		h.engineAddress = req.GetEngineAddress()
		h.mu.Unlock()
	}
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: hostVersion}, nil
}

func (h *host) GetRequiredPlugins(
	context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (h *host) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

func (h *host) GetProgramDependencies(
	context.Context, *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	return &pulumirpc.GetProgramDependenciesResponse{}, nil
}

func (h *host) RuntimeOptionsPrompts(
	context.Context, *pulumirpc.RuntimeOptionsRequest,
) (*pulumirpc.RuntimeOptionsResponse, error) {
	return &pulumirpc.RuntimeOptionsResponse{}, nil
}

func (h *host) InstallDependencies(
	_ *pulumirpc.InstallDependenciesRequest,
	stream grpc.ServerStreamingServer[pulumirpc.InstallDependenciesResponse],
) error {
	message := "Dependencies are installed by the project's bootstrap script; nothing to do.\n"
	return stream.Send(&pulumirpc.InstallDependenciesResponse{Stdout: []byte(message)})
}

func (h *host) About(_ context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	python, err := pythonOf(req.GetInfo())
	if err != nil {
		return nil, err
	}
	out, _ := exec.Command(python, "--version").Output()
	fields := strings.Fields(string(out))
	version := ""
	if len(fields) > 0 {
		version = fields[len(fields)-1]
	}
	return &pulumirpc.AboutResponse{Executable: python, Version: version}, nil
}

func (h *host) Run(_ context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	python, err := pythonOf(req.GetInfo())
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
	script, err := exec.LookPath("pulumi-language-python-exec")
	if err != nil {
		return &pulumirpc.RunResponse{
			Error: "pulumi-language-python-exec is not on PATH. Run the project's bootstrap script.",
		}, nil
	}
	configMap := req.GetConfig()
	if configMap == nil {
		configMap = map[string]string{}
	}
	config, _ := json.Marshal(configMap)
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secrets, _ := json.Marshal(secretKeys)
	program := exec.Command(python, append([]string{"-u", script}, h.execFlags(req)...)...)
	program.Env = append(withoutPythonHome(os.Environ()),
		"PULUMI_CONFIG="+string(config), "PULUMI_CONFIG_SECRET_KEYS="+string(secrets))
	program.Dir = req.GetPwd()
	// The program's output goes to this process's stdout and stderr, which the engine shows.
	program.Stdout, program.Stderr = os.Stdout, os.Stderr
	if err := program.Start(); err != nil {
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("The program did not start: %v", err)}, nil
	}
	h.track(program, true)
	err = program.Wait()
	h.track(program, false)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return &pulumirpc.RunResponse{}, nil
	case errors.As(err, &exit) && exit.ExitCode() == exitErrorAlreadyShown:
		return &pulumirpc.RunResponse{Bail: true}, nil
	case errors.As(err, &exit):
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("Program exited with non-zero exit code: %d", exit.ExitCode()),
		}, nil
	default:
		return &pulumirpc.RunResponse{Error: fmt.Sprintf("The program failed: %v", err)}, nil
	}
}

func (h *host) track(program *exec.Cmd, running bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if running {
		h.programs[program] = struct{}{}
	} else {
		delete(h.programs, program)
	}
}

func (h *host) execFlags(req *pulumirpc.RunRequest) []string {
	flags := []string{
		"--monitor=" + req.GetMonitorAddress(),
		"--engine=" + h.engine(),
		"--project=" + req.GetProject(),
		"--stack=" + req.GetStack(),
		"--pwd=" + req.GetPwd(),
		fmt.Sprintf("--dry_run=%t", req.GetDryRun()),
		fmt.Sprintf("--parallel=%d", req.GetParallel()),
		"--organization=" + req.GetOrganization(),
	}
	info := req.GetInfo()
	if info.GetRootDirectory() != "" {
		flags = append(flags, "--root_directory="+info.GetRootDirectory())
	}
	program := info.GetProgramDirectory()
	if program == "" {
		program = req.GetPwd()
	}
	if program == "" {
		program = "."
	}
	if entry := info.GetEntryPoint(); entry != "" && entry != "." {
		program = filepath.Join(program, entry)
	}
	return append(append(flags, program), req.GetArgs()...)
}

// pythonOf is the interpreter of the project's virtualenv (Pulumi.yaml `runtime.options.virtualenv`),
// or python3 on PATH when the project names none.
func pythonOf(info *pulumirpc.ProgramInfo) (string, error) {
	virtualenv, _ := info.GetOptions().AsMap()["virtualenv"].(string)
	if virtualenv == "" {
		return exec.LookPath("python3")
	}
	venv := virtualenv
	if !filepath.IsAbs(venv) {
		root := info.GetRootDirectory()
		if root == "" {
			root = "."
		}
		venv = filepath.Join(root, venv)
	}
	python := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(python); err != nil {
		return "", fmt.Errorf("The virtualenv %s named in Pulumi.yaml has no bin/python. "+
			"Run the project's bootstrap script to create it.", venv)
	}
	return python, nil
}

func withoutPythonHome(env []string) []string {
	kept := env[:0:0]
	for _, entry := range env {
		if !strings.HasPrefix(entry, "PYTHONHOME=") {
			kept = append(kept, entry)
		}
	}
	return kept
}

// engineGone says whether the engine refuses connections: its CLI has ended.
func engineGone(address string) bool {
	conn, err := net.DialTimeout("tcp", address, 5*time.Second)
	if err == nil {
		conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// watchEngine ends the programs and stops the server once the engine is gone. A CLI killed with
// SIGKILL (or a second Ctrl-C) does not stop its plugins: without this, the program and this host
// would wait for it forever.
func watchEngine(h *host, stop func()) {
	for {
		address := h.engine()
		if address == "" {
			return
		}
		if engineGone(address) {
			break
		}
		time.Sleep(enginePoll)
	}
	h.mu.Lock()
	for program := range h.programs {
		_ = program.Process.Signal(syscall.SIGTERM)
	}
	h.mu.Unlock()
	stop()
}

func main() {
	h := &host{programs: map[*exec.Cmd]struct{}{}}
	// The engine passes its address; flags of Pulumi's own host (tracing, root) change nothing here.
	for _, arg := range os.Args[1:] {
		if !strings.HasPrefix(arg, "-") {
			h.engineAddress = arg
			break
		}
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-language-python: cannot listen: %v\n", err)
		os.Exit(1)
	}
	server := grpc.NewServer()
	pulumirpc.RegisterLanguageRuntimeServer(server, h)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			// Like a one-second grace: requests in flight may finish, then the server ends.
			timer := time.AfterFunc(time.Second, server.Stop)
			go func() { server.GracefulStop(); timer.Stop() }()
		})
	}
	// The engine stops its plugins with SIGINT once it is done with them; that is a normal exit.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-signals; stop() }()
	go watchEngine(h, stop)
	// The engine reads the port from the first line of stdout.
	fmt.Println(listener.Addr().(*net.TCPAddr).Port)
	if err := server.Serve(listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		fmt.Fprintf(os.Stderr, "pulumi-language-python: %v\n", err)
		os.Exit(1)
	}
}
