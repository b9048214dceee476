// kvsfs-fuzz: libFuzzer targets for the parsers that read bytes from outside the process.
//
//     kvsfs-fuzz TARGET [libFuzzer options] [corpus directories or inputs]
//
// TARGET is one of `FuzzTarget`'s names, or comes from KVSFS_FUZZ_TARGET when the first argument
// is not one. Build with `-sanitize=fuzzer,address -use-ld=lld` (scripts/fuzz does).
import Foundation

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
) -> Int32

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    FuzzTarget.selected.run(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

var arguments = CommandLine.arguments
let named = arguments.count > 1 ? FuzzTarget(rawValue: arguments[1]) : nil
if named != nil { arguments.remove(at: 1) }
guard let target = named ?? ProcessInfo.processInfo.environment["KVSFS_FUZZ_TARGET"].flatMap(FuzzTarget.init(rawValue:)) else {
    let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")
    FileHandle.standardError.write(Data("usage: kvsfs-fuzz \(names) [libFuzzer options] [corpus...] (or set KVSFS_FUZZ_TARGET)\n".utf8))
    exit(2)
}
FuzzTarget.selected = target

// libFuzzer keeps pointers into argv for the whole run: the copies are never freed.
var argc = Int32(arguments.count)
var argv = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>.allocate(capacity: arguments.count + 1)
for (index, argument) in arguments.enumerated() { argv[index] = strdup(argument) }
argv[arguments.count] = nil
exit(LLVMFuzzerRunDriver(&argc, &argv, fuzzTestOneInput))
