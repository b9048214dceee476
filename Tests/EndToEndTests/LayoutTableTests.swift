import Foundation
import Testing

/// The README's layout table is where a newcomer looks first: it must name every source file,
/// in the row of its module.
@Suite("The README's layout table")
struct LayoutTableTests {
    @Test("every file under Sources/ is named, in backquotes, in the row of its module")
    func everySourceFileNamed() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let rows = readme.split(separator: "\n").filter { $0.hasPrefix("| `") }
        let sources = root.appendingPathComponent("Sources")
        var unnamed = [String]()
        for module in try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted() {
            guard let row = rows.first(where: { $0.split(separator: "|").first?.contains("`\(module)`") == true }) else {
                unnamed.append("\(module)/ (no row)")
                continue
            }
            for file in try FileManager.default.contentsOfDirectory(atPath: sources.appendingPathComponent(module).path).sorted() {
                let name = file.hasSuffix(".swift") ? String(file.dropLast(".swift".count)) : file
                if !row.contains("`\(name)`") { unnamed.append("\(module)/\(file)") }
            }
        }
        #expect(unnamed.isEmpty, "not in the README's layout table: \(unnamed)")
    }
}
