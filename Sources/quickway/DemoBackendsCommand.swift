import ArgumentParser
import QuickwayCore

/// `quickway demo-backends`: local backends for trying the gateway (scripts/run.sh).
struct DemoBackendsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo-backends",
        abstract: "Run local demo backends.",
        discussion: "Default: 127.0.0.2:9001=2ms 127.0.0.3:9001=10ms 127.0.0.4:9001=30ms.")

    @Option(name: .customLong("backend"), help: ArgumentHelp("A backend's address and its delay, such as 127.0.0.2:9001=5ms; repeatable.", valueName: "ADDR=DELAY"))
    var specs: [String] = []

    func validate() throws { _ = try backends() }

    func run() throws {
        let backends = try backends()
        do {
            let demo = try DemoBackends(backends)
            print("demo backends: " + backends.map { "\($0.address) (\($0.delayMillis)ms)" }.joined(separator: ", "))
            demo.run()
        } catch {
            throw CommandFailure(message: "cannot start demo backends: \(error)", code: 1)
        }
    }

    /// The `--backend` values, or the three defaults.
    private func backends() throws -> [DemoBackends.Backend] {
        guard !specs.isEmpty else {
            return [("127.0.0.2", 2), ("127.0.0.3", 10), ("127.0.0.4", 30)].map {
                .init(address: ListenAddress(host: $0.0, port: 9001), delayMillis: $0.1)
            }
        }
        return try specs.map { spec in
            let parts = spec.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2, let addr = ListenAddress.parse(parts[0]), let delay = Units.parseDurationMillis(parts[1]) else {
                throw ValidationError("bad --backend \(spec): expected ADDR=DELAY such as 127.0.0.2:9001=5ms")
            }
            return .init(address: addr, delayMillis: delay)
        }
    }
}
