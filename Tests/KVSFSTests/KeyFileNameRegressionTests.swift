import Foundation
import KVSFS
import Testing

/// Keys the fuzzer (`scripts/fuzz keyname`) found without a file name that maps back, replayed
/// from `Tests/Corpus/keyname/regressions`, and their relatives.
@Suite("Key file names the fuzzer found")
struct KeyFileNameRegressionTests {
    static let regressions = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Corpus/keyname/regressions")

    @Test("every regression input, as a key, has a file name that maps back to it")
    func replay() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.regressions.path)
        #expect(!names.isEmpty)
        for file in names {
            let key = String(decoding: try Data(contentsOf: Self.regressions.appendingPathComponent(file)), as: UTF8.self)
            let name = KeyFileName.fileName(forKey: key)
            #expect(KeyFileName.key(forFileName: name) == key, "\(file): key \(key.debugDescription) is listed as \(name)")
        }
    }

    /// An editor-like key whose first or last character is escaped anyway (`/`, NUL, `%XX`) or
    /// is not ASCII: its name was built by escaping the first byte of the escaped name, and was
    /// listed by `ls` but could not be opened.
    @Test("an editor-like key whose first or last character needs escaping anyway", arguments: [
        ("\u{0}~", "%00%7E"), ("/x~", "%2Fx%7E"), ("%41~", "%2541%7E"), (".#x/", "%2E#x%2F"), ("é~", "%C3%A9%7E"),
        ("x~", "%78%7E"), ("#é#", "%23é%23"),
    ])
    func escapedEnds(key: String, expected: String) {
        let name = KeyFileName.fileName(forKey: key)
        #expect(name == expected)
        #expect(!EditorFileRule.isEditorFile(name))
        #expect(KeyFileName.key(forFileName: name) == key)
    }
}
