import ArgumentParser
import Foundation

// Runs the command line (`QuickwayCommand`). Exit codes: 0 done, 1 an invalid config or a
// gateway that cannot start, 2 a usage error (argument-parser's default, 64, is mapped
// to 2, which scripts have always seen).
do {
    var command = try QuickwayCommand.parseAsRoot()
    try command.run()
} catch let failure as CommandFailure {
    FileHandle.standardError.write(Data((failure.message + "\n").utf8))
    exit(failure.code)
} catch let error where QuickwayCommand.exitCode(for: error) == .validationFailure {
    FileHandle.standardError.write(Data((QuickwayCommand.fullMessage(for: error) + "\n").utf8))
    exit(CommandFailure.usageCode)
} catch {
    QuickwayCommand.exit(withError: error)
}
