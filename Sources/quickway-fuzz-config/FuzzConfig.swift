import Glibc
import QuickwayCore

// libFuzzer harness for the config loader (YAML through Yams, then the whole schema).
// Property: any input either loads or is refused with issues that each name a message;
// nothing crashes or hangs. Built by scripts/dev/fuzz.sh with `-D FUZZING` and
// `-sanitize=fuzzer` (libFuzzer then provides `main`); a normal build gets the `main`
// below, which replays input files (for reproducing a crash).

func fuzzConfig(_ bytes: UnsafeRawBufferPointer) {
    guard let text = String(validating: bytes, as: UTF8.self) else { return }
    do {
        _ = try ConfigLoader.load(yaml: text, file: "fuzz.yaml", environment: ["S": "x"])
    } catch let e as ConfigError {
        precondition(!e.issues.isEmpty && e.issues.allSatisfy { !$0.message.isEmpty })
    } catch {
        preconditionFailure("unexpected error type \(error)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfigEntry(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    fuzzConfig(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

#if FUZZING
// SwiftPM links an executable's entry point as `<module>_main`; under FUZZING that entry
// hands over to libFuzzer's driver (its own `main` is then not linked in).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<Int32>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> Int32) -> Int32

@_cdecl("quickway_fuzz_config_main")
public func fuzzDriverMain(_ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32 {
    var c = argc
    var v = argv
    return LLVMFuzzerRunDriver(&c, &v) { data, size in fuzzConfigEntry(data, size) }
}
#else
@main
struct ReplayFuzzInputs {
    static func main() {
        for path in CommandLine.arguments.dropFirst() {
            guard let f = fopen(path, "rb") else { continue }
            var bytes: [UInt8] = []
            var buf = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = fread(&buf, 1, buf.count, f)
                if n <= 0 { break }
                bytes.append(contentsOf: buf[0..<n])
            }
            fclose(f)
            bytes.withUnsafeBytes { fuzzConfig($0) }
            print("\(path): ok")
        }
    }
}
#endif
