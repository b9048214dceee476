import KVSFS

/// Any bytes, as a file name (what the kernel hands over) and as a key (what a remote may hold).
///
/// Invariants: a name that maps to a key is exactly (byte for byte) that key's file name, so
/// no two names stand for one key; a key's file name maps back to the key, is a name a
/// directory can hold, is not an editor's file, and fits NAME_MAX when the key fits the store.
enum KeyNameFuzzing {
    static func run(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)

        if let key = KeyFileName.key(forFileName: text) {
            let name = KeyFileName.fileName(forKey: key)
            guard Array(name.utf8) == Array(text.utf8) else {
                fatalError("name \(debug(text)) maps to key \(debug(key)), whose file name is \(debug(name))")
            }
        }

        guard !text.isEmpty else { return }
        let name = KeyFileName.fileName(forKey: text)
        let back = KeyFileName.key(forFileName: name)
        guard let back, Array(back.utf8) == Array(text.utf8) else {
            fatalError("key \(debug(text)) has file name \(debug(name)), which maps to \(back.map(debug) ?? "no key")")
        }
        guard !name.utf8.contains(UInt8(ascii: "/")), !name.utf8.contains(0), name != ".", name != ".." else {
            fatalError("key \(debug(text)) has file name \(debug(name)), which no directory can hold")
        }
        guard !EditorFileRule.isEditorFile(name) else {
            fatalError("key \(debug(text)) has file name \(debug(name)), which is taken for an editor's file")
        }
        guard text.utf8.count > 64 || name.utf8.count <= 255 else {
            fatalError("key \(debug(text)) has file name \(debug(name)), longer than NAME_MAX")
        }
    }

    private static func debug(_ string: String) -> String { "\(string.debugDescription) \(Array(string.utf8))" }
}
