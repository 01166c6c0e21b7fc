// SPDX-License-Identifier: Apache-2.0

// Command agentprobe is what the Docker suite's agent test image runs to
// look at the network from inside the agent container. It is static, so the
// image needs nothing of its own but the base.
//
//	agentprobe mcp URL [KEYFILE]   POST an MCP initialize to URL, with the
//	                               bearer key from KEYFILE when given; then,
//	                               with a key, tools/list. Prints
//	                               "status=N" and, with a key, "tools=a,b".
//	agentprobe resolve NAME        prints "addrs=..." or fails
//	agentprobe dial HOST:PORT      prints "connected" or fails (3s limit)
//	agentprobe sleep               waits for SIGTERM (the container's PID 1)
//
// Errors go to stderr as one line and exit 1.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "agentprobe: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: agentprobe mcp|resolve|dial|sleep ...")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case args[0] == "mcp" && (len(args) == 2 || len(args) == 3):
		key := ""
		if len(args) == 3 {
			b, err := os.ReadFile(args[2])
			if err != nil {
				return fmt.Errorf("read key: %w", err)
			}
			key = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
		}
		return probeMCP(ctx, args[1], key, out)
	case args[0] == "resolve" && len(args) == 2:
		addrs, err := net.DefaultResolver.LookupHost(ctx, args[1])
		if err != nil {
			return fmt.Errorf("resolve %s: %w", args[1], err)
		}
		fmt.Fprintf(out, "addrs=%s\n", strings.Join(addrs, ","))
		return nil
	case args[0] == "dial" && len(args) == 2:
		c, err := net.DialTimeout("tcp", args[1], 3*time.Second)
		if err != nil {
			return fmt.Errorf("dial %s: %w", args[1], err)
		}
		c.Close()
		fmt.Fprintln(out, "connected")
		return nil
	case args[0] == "sleep" && len(args) == 1:
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		return nil
	}
	return fmt.Errorf("bad arguments %q", args)
}

// probeMCP initializes an MCP session at url and, with a key, lists tools.
func probeMCP(ctx context.Context, url, key string, out io.Writer) error {
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agentprobe","version":"1"}}}`
	resp, body, err := post(ctx, url, key, "", init)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "status=%d\n", resp.StatusCode)
	if key == "" || resp.StatusCode != http.StatusOK {
		return nil
	}
	_ = body
	session := resp.Header.Get("Mcp-Session-Id")
	if _, _, err := post(ctx, url, key, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return err
	}
	resp, body, err = post(ctx, url, key, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if err != nil {
		return err
	}
	var msg struct {
		Result struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(jsonPart(body), &msg); err != nil {
		return fmt.Errorf("decode tools/list answer (status %d): %w", resp.StatusCode, err)
	}
	var names []string
	for _, tl := range msg.Result.Tools {
		names = append(names, tl.Name)
	}
	sort.Strings(names)
	fmt.Fprintf(out, "tools=%s\n", strings.Join(names, ","))
	return nil
}

func post(ctx context.Context, url, key, session, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("post %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("post %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("read answer of %s: %w", url, err)
	}
	return resp, b, nil
}

// jsonPart returns the JSON of an answer that may come as server-sent
// events (the last "data:" line).
func jsonPart(b []byte) []byte {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		return b
	}
	var last []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			last = bytes.TrimSpace(d)
		}
	}
	return last
}
