"""A fake node agent: /metrics (Prometheus text) on one address, for the
tests of `kubectl gpupool top` and the extender's /ui that read agents
through the (fake) API server's node proxy. Real agents listen on their
node's address; fake ones on 127.0.0.N, all at one port."""

import http.server
import threading
import time


class Agent:
    """A node agent's /metrics on one loopback address."""

    def __init__(self, host, port, text, delay=0.0):
        agent = self
        self.text, self.delay, self.hits = text, delay, 0
        self.authorization = []  # each request's Authorization header (None: none sent)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                agent.hits += 1
                agent.authorization.append(self.headers.get("Authorization"))
                if agent.delay:
                    time.sleep(agent.delay)
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                data = agent.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server((host, port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()



def start_agents(specs, tries=10):
    """Agents at one port on several addresses: [(host, text[, delay])] ->
    [Agent]. The port is the first agent's free one; when another address
    has it taken (a wildcard listener of some other program), start over."""
    for _ in range(tries):
        agents = []
        try:
            for spec in specs:
                host, text = spec[0], spec[1]
                delay = spec[2] if len(spec) > 2 else 0.0
                agents.append(Agent(host, agents[0].port if agents else 0, text, delay))
            return agents
        except OSError:
            for a in agents:
                a.stop()
    raise OSError("no port free on all of %s" % [s[0] for s in specs])
