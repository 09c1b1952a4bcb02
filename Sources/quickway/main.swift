import Foundation
import QuickwayCore

/// The `quickway` command line: serve, check, demo-backends.
let usage = """
quickway \(QuickwayVersion.string): an HTTP API gateway

Usage:
  quickway serve --config FILE     run the gateway (default FILE: config.yaml)
  quickway check --config FILE     validate a config file and exit (0 valid, 1 invalid)
  quickway demo-backends [--backend ADDR=DELAY]...
                                   run local demo backends; default:
                                   127.0.0.2:9001=2ms 127.0.0.3:9001=10ms 127.0.0.4:9001=30ms
  quickway sign --key ID --secret-env VAR --salt S --method M --url URL [--body-file F]
                [--timestamp UNIX] [--nonce N] [--curl]
                                   print the QW1 Authorization value for a request
                                   (--curl: a ready curl command instead)
  quickway --help | --version

Signals (serve): SIGTERM or SIGINT stop accepting, finish requests in flight, exit 0;
SIGHUP reloads the config file; SIGUSR1 reopens the access log (rotation).
Docs: README.md (configuration, signed calls, fastest IP, cache, Redis tier, deploying).
"""

func fail(_ message: String, code: Int32 = 2) -> Never {
    FileHandle.standardError.write((message + "\n").data(using: .utf8)!)
    exit(code)
}

/// The value after `--config`, or config.yaml.
func configPath(_ args: ArraySlice<String>) -> String {
    var path = "config.yaml"
    var i = args.startIndex
    while i < args.endIndex {
        let a = args[i]
        if a == "--config" || a == "-c" {
            guard i + 1 < args.endIndex else { fail("--config needs a file path") }
            path = args[i + 1]
            i += 2
        } else if a.hasPrefix("--config=") {
            path = String(a.dropFirst("--config=".count))
            i += 1
        } else {
            fail("unknown argument \(a)\n\n\(usage)")
        }
    }
    return path
}

func loadConfig(_ path: String) -> GatewayConfig {
    do {
        return try ConfigLoader.load(file: path)
    } catch let e as ConfigError {
        fail("invalid config:\n\(e.description)", code: 1)
    } catch {
        fail("invalid config: \(error)", code: 1)
    }
}

let args = CommandLine.arguments.dropFirst()
switch args.first {
case nil, "--help", "-h", "help":
    print(usage)
case "--version", "version":
    print("quickway \(QuickwayVersion.string)")
case "check":
    let path = configPath(args.dropFirst())
    let c = loadConfig(path)
    print("\(path): valid (\(c.services.count) service(s), \(c.routes.count) route(s), \(c.workers) worker(s))")
case "serve":
    let config = loadConfig(configPath(args.dropFirst()))
    Log.level = config.log.level
    do {
        try Gateway(config: config).run()
    } catch {
        fail("cannot start: \(error)", code: 1)
    }
case "sign":
    print(SignCommand.run(Array(args.dropFirst())))
case "demo-backends":
    var backends: [DemoBackends.Backend] = []
    var rest = Array(args.dropFirst())
    while !rest.isEmpty {
        let a = rest.removeFirst()
        guard a == "--backend", !rest.isEmpty else { fail("expected --backend ADDR=DELAY, got \(a)") }
        let spec = rest.removeFirst()
        let parts = spec.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, let addr = ListenAddress.parse(parts[0]), let delay = Units.parseDurationMillis(parts[1]) else {
            fail("bad --backend \(spec): expected ADDR=DELAY such as 127.0.0.2:9001=5ms")
        }
        backends.append(.init(address: addr, delayMillis: delay))
    }
    if backends.isEmpty {
        backends = [("127.0.0.2", 2), ("127.0.0.3", 10), ("127.0.0.4", 30)].map {
            .init(address: ListenAddress(host: $0.0, port: 9001), delayMillis: $0.1)
        }
    }
    do {
        let demo = try DemoBackends(backends)
        print("demo backends: " + backends.map { "\($0.address) (\($0.delayMillis)ms)" }.joined(separator: ", "))
        demo.run()
    } catch {
        fail("cannot start demo backends: \(error)", code: 1)
    }
default:
    fail("unknown command \(args.first!)\n\n\(usage)")
}
