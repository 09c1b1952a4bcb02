import Foundation
import ArgumentParser
import QuickwayCore

/// `--config FILE` (also `-c FILE`, `--config=FILE`), shared by `serve` and `check`.
struct ConfigOption: ParsableArguments {
    @Option(name: [.customShort("c"), .long], help: ArgumentHelp("The config file.", valueName: "FILE"))
    var config = "config.yaml"

    /// The loaded config; an invalid file is exit 1 with every problem by path and line.
    /// `secretsMayBeMissing`: unset `*_env` variables are warnings (`check`).
    func load(secretsMayBeMissing: Bool = false) throws -> GatewayConfig {
        do {
            return try ConfigLoader.load(file: config, secretsMayBeMissing: secretsMayBeMissing)
        } catch let e as ConfigError {
            throw CommandFailure(message: "invalid config:\n\(e.description)", code: 1)
        } catch {
            throw CommandFailure(message: "invalid config: \(error)", code: 1)
        }
    }
}

/// `quickway serve`: runs the gateway until SIGTERM or SIGINT.
struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the gateway.",
        discussion: """
        SIGTERM or SIGINT stop accepting, finish requests in flight (up to limits.drain_timeout) \
        and exit 0; SIGHUP reloads the config file; SIGUSR1 reopens the access log (rotation).
        """)

    @OptionGroup var options: ConfigOption

    func run() throws {
        let config = try options.load()
        Log.level = config.log.level
        do {
            try Gateway(config: config).run()
        } catch {
            throw CommandFailure(message: "cannot start: \(error)", code: 1)
        }
    }
}

/// `quickway check`: validates a config file (exit 0 valid, 1 invalid).
struct CheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate a config file and exit (0 valid, 1 invalid, every problem listed by file:line: path).")

    @OptionGroup var options: ConfigOption

    func run() throws {
        // CI that validates configs holds no secrets: an unset variable is a warning here
        // (serve refuses to start without it).
        let c = try options.load(secretsMayBeMissing: true)
        for w in c.warnings {
            FileHandle.standardError.write(Data("warning: \(options.config):\(w.line.map(String.init) ?? "-"): \(w.path): \(w.message)\n".utf8))
        }
        print("\(options.config): valid (\(c.services.count) service(s), \(c.routes.count) route(s), \(c.workers) worker(s))")
    }
}
